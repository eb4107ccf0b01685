package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// The harness writes state-root files itself (100,000 finished runs,
// 10,000 dead ones) instead of calling crew that many times. It never
// invents the format: it copies a record crew wrote, keeps every field and
// its order, and changes only the identity and the times. The copy is
// checked to round-trip byte for byte before it is used.

// field is one member of a JSON object, value kept verbatim.
type field struct {
	key string
	val json.RawMessage
}

// object is a JSON object that keeps its members' order.
type object []field

func parseObject(b []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("unexpected %v", tok)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		o = append(o, field{key, raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return o, nil
}

func (o object) get(key string) (json.RawMessage, bool) {
	for _, f := range o {
		if f.key == key {
			return f.val, true
		}
	}
	return nil, false
}

// with returns a copy with key set to v. The key must exist: a template
// that lacks it means the format changed, and the harness says so instead
// of writing something crew never wrote.
func (o object) with(key string, v any) (object, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make(object, len(o))
	copy(out, o)
	for i := range out {
		if out[i].key == key {
			out[i].val = b
			return out, nil
		}
	}
	return nil, fmt.Errorf("record template has no %q field; has crew's record format changed?", key)
}

// encode renders the object as crew does: json.MarshalIndent with two
// spaces, and a final newline.
func (o object) encode() ([]byte, error) {
	var compact bytes.Buffer
	compact.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			compact.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		compact.Write(k)
		compact.WriteByte(':')
		if err := json.Compact(&compact, f.val); err != nil {
			return nil, err
		}
	}
	compact.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// template is a record crew wrote, ready to be copied.
type template struct {
	obj  object
	path string // where crew wrote it
}

// loadTemplate reads a record crew wrote at path.
func loadTemplate(path string) (*template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read a record crew wrote: %w", err)
	}
	if b, err = recordOfFile(b); err != nil {
		return nil, fmt.Errorf("record %s: %w; crew's on-disk format changed (%s)", path, err, layoutFile)
	}
	return parseTemplate(b, path)
}

// parseTemplate checks that a record crew wrote (b, read from path)
// round-trips through the harness's encoder, byte for byte.
func parseTemplate(b []byte, path string) (*template, error) {
	o, err := parseObject(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	again, err := o.encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(again, b) {
		return nil, fmt.Errorf("record %s does not round-trip byte for byte through the harness's encoder; crew's on-disk format changed (expected json.MarshalIndent with two spaces)", path)
	}
	return &template{obj: o, path: path}, nil
}

// str is a string field of the template, "" when absent or not a string.
func (tp *template) str(key string) string {
	v, ok := tp.obj.get(key)
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// instance fills the template for a run created at t. Times present in
// the template (not null) move with t; null ones stay null.
func (tp *template) instance(id, task string, t time.Time) ([]byte, error) {
	o, err := tp.obj.with("runId", id)
	if err != nil {
		return nil, err
	}
	if o, err = o.with("task", task); err != nil {
		return nil, err
	}
	if o, err = o.with("createdAt", t.UTC()); err != nil {
		return nil, err
	}
	for key, d := range map[string]time.Duration{"startedAt": 2 * time.Millisecond, "finishedAt": 5 * time.Millisecond} {
		v, ok := o.get(key)
		if !ok {
			return nil, fmt.Errorf("record template has no %q field", key)
		}
		if string(v) != "null" {
			if o, err = o.with(key, t.Add(d).UTC()); err != nil {
				return nil, err
			}
		}
	}
	return o.encode()
}
