// Package cmddoc is the command tree as far as its documentation goes:
// what `crew __commands` prints and internal/tools/gendocs reads back to
// put the commands together again for cobra/doc. It is the one
// definition of that JSON, so the two sides cannot drift apart; it has no
// dependencies, so crew pays nothing for it at start-up.
package cmddoc

// Command is one command of the tree.
type Command struct {
	Use             string    `json:"use"`
	Short           string    `json:"short"`
	Long            string    `json:"long,omitempty"`
	Example         string    `json:"example,omitempty"`
	Runnable        bool      `json:"runnable"`
	Flags           []Flag    `json:"flags,omitempty"`
	PersistentFlags []Flag    `json:"persistentFlags,omitempty"`
	Commands        []Command `json:"commands,omitempty"`
}

// Flag is one flag: its pflag type and its default as pflag shows them.
type Flag struct {
	Name         string `json:"name"`
	Shorthand    string `json:"shorthand,omitempty"`
	Usage        string `json:"usage"`
	Type         string `json:"type"`
	Default      string `json:"default"`
	NoOptDefault string `json:"noOptDefault,omitempty"`
}
