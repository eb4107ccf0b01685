package supervise

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
)

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func TestRunLogNoteStartsOnALineOfItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name, before, want string
	}{
		{"empty log", "", "[crew: attempt 2 of 3 after exit 1]\n"},
		{"output ends a line", "out\n", "out\n[crew: attempt 2 of 3 after exit 1]\n"},
		{"output ends mid-line", "out", "out\n[crew: attempt 2 of 3 after exit 1]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := &runLog{w: &buf, c: nopCloser{&buf}}
			if tc.before != "" {
				_, err := l.Write([]byte(tc.before))
				assert.NoError(t, err)
			}
			l.note("attempt 2 of 3 after exit 1")
			assert.Equal(t, tc.want, buf.String())
			_, _ = l.Write([]byte("next"))
			l.note("attempt 3 of 3 after exit 1")
			assert.Equal(t, tc.want+"next\n[crew: attempt 3 of 3 after exit 1]\n", buf.String())
		})
	}
}
