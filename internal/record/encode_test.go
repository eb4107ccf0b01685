package record

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// marshalIndent is what Encode must write: encoding/json's own rendering.
func marshalIndent(t *testing.T, r *Run) []byte {
	t.Helper()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// awkward strings: every escape encoding/json makes, and plain ones.
var awkward = []string{"", "t", "a b", `q"uote\back`, "<tag>&amp;", "\x00\x01\x1f\x7f", "\b\f\n\r\t",
	"caf\u00e9 \u65e5\u672c", "\u2028\u2029", "\xff\xfe", "a\xc3", "\U0001F600", "/slash/"}

// fill sets v, whatever its type, to random values; every pointer and
// slice is sometimes nil and every field sometimes zero, so that the
// omitempty members are exercised both ways. It walks the type by
// reflection, so a field added to Run later is filled too, and the
// comparison with encoding/json fails until Encode writes it.
func fill(rnd *rand.Rand, v reflect.Value) {
	if rnd.IntN(5) == 0 {
		v.SetZero()
		return
	}
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		zone := time.FixedZone("z", (rnd.IntN(48)-24)*30*60)
		t := time.Unix(rnd.Int64N(4e10)-1e10, rnd.Int64N(1e9)).In(zone)
		v.Set(reflect.ValueOf(t))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(awkward[rnd.IntN(len(awkward))] + awkward[rnd.IntN(len(awkward))])
	case reflect.Int, reflect.Int64:
		v.SetInt(rnd.Int64N(1<<40) - 1<<39)
	case reflect.Uint64:
		v.SetUint(rnd.Uint64())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(rnd, p.Elem())
		v.Set(p)
	case reflect.Slice:
		n := rnd.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(rnd, s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		n := 1 + rnd.IntN(3)
		m := reflect.MakeMapWithSize(v.Type(), n)
		for range n {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(rnd, k)
			fill(rnd, e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(rnd, v.Field(i))
		}
	default:
		panic("fill: no case for " + v.Type().String())
	}
}

func TestEncodeIsMarshalIndent(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		var r Run
		fill(rnd, reflect.ValueOf(&r).Elem())
		got, err := r.Encode()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if want := marshalIndent(t, &r); !bytes.Equal(got, want) {
			t.Fatalf("record %d: Encode differs from json.MarshalIndent:\n got %s\nwant %s", i, got, want)
		}
	}
	for _, st := range []State{Provisioning, Running, Succeeded, Failed, Stopped, Interrupted} {
		r := testRecord(testID, st)
		got, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if want := marshalIndent(t, r); !bytes.Equal(got, want) {
			t.Fatalf("%s: Encode differs from json.MarshalIndent:\n got %s\nwant %s", st, got, want)
		}
	}
}

func TestEncodeEveryFieldFilled(t *testing.T) {
	// The comparison above proves nothing of a field that fill never sets:
	// make sure every field of Run was non-zero in some record.
	rnd := rand.New(rand.NewPCG(1, 2))
	typ := reflect.TypeFor[Run]()
	seen := make([]bool, typ.NumField())
	for range 200 {
		var r Run
		fill(rnd, reflect.ValueOf(&r).Elem())
		for i := range seen {
			seen[i] = seen[i] || !reflect.ValueOf(r).Field(i).IsZero()
		}
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("field %s was never filled", typ.Field(i).Name)
		}
	}
}

func TestEncodeTimeOutOfRange(t *testing.T) {
	r := testRecord(testID, Running)
	r.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := json.Marshal(r); err == nil {
		t.Fatal("encoding/json encoded a year JSON cannot hold; the test's premise is gone")
	}
	if b, err := r.Encode(); err == nil {
		t.Fatalf("Encode wrote a year JSON cannot hold:\n%s", b)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range awkward {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json: %s", s, got, want)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	r := testRecord(testID, Succeeded)
	for b.Loop() {
		if _, err := r.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}
