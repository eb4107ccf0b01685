package record

import (
	"bytes"
	"reflect"
	"testing"
)

func FuzzDecodeRecord(f *testing.F) {
	for _, st := range []State{Provisioning, Running, Succeeded, Failed, Stopped, Interrupted} {
		b, err := testRecord(testID, st).Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"{}",
		"null",
		`{"version":1}`,
		`{"version":2}`,
		`{"version":1,"runId":"r-20240102T030405.000000006Z-0123456789abcdef","task":"t","state":"running"}`,
		`{"version":1,"runId":"r-20240102T030405.000000006Z-0123456789abcdef","task":"t","state":"failed","finishedAt":"2024-01-02T03:04:05+23:59"}`,
		`{"version":1,"runId":"r-20240102T030405.000000006Z-0123456789abcdef","task":"\u0000","state":"running"}`,
		`{"version":1,"runId":"r-20240102T030405.000000006Z-0123456789abcdef","task":"a\ud800","state":"running"}`,
		"{\"version\":1,\"runId\":\"r-20240102T030405.000000006Z-0123456789abcdef\",\"task\":\"\xff\",\"state\":\"running\",\"command\":[\"\xfe\"]}",
		`{"Version":1,"VERSION":2}`,
		`[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := DecodeRun(data)
		if err != nil {
			if rec != nil {
				t.Fatalf("DecodeRun returned a record with error %v", err)
			}
			return
		}
		if rec == nil {
			t.Fatal("DecodeRun returned neither a record nor an error")
		}
		// What decodes re-encodes, and decodes again to the same record.
		b, err := rec.Encode()
		if err != nil {
			t.Fatalf("Encode of a decoded record: %v", err)
		}
		if want := marshalIndent(t, rec); !bytes.Equal(b, want) {
			t.Fatalf("Encode differs from json.MarshalIndent:\n got %s\nwant %s", b, want)
		}
		rec2, err := DecodeRun(b)
		if err != nil {
			t.Fatalf("re-decode: %v\n%s", err, b)
		}
		b2, err := rec2.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("round trip not stable:\n%s\n%s", b, b2)
		}
		if rec2.Version != RecordVersion || rec2.RunID != rec.RunID || rec2.Task != rec.Task || rec2.State != rec.State {
			t.Fatalf("round trip changed identity: %+v vs %+v", rec, rec2)
		}
	})
}

func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"maximumInProgress":4}`,
		"{\n  \"version\": 1,\n  \"maximumInProgress\": 1\n}\n",
		`{"version":1,"maximumInProgress":0}`,
		`{"version":2,"maximumInProgress":4}`,
		`{"version":1,"maximumInProgress":4,"extra":true}`,
		`{"version":1,"maximumInProgress":4} {}`,
		`{"VERSION":1,"MaximumInProgress":3}`,
		`{"version":1,"maximumInProgress":1e3}`,
		`{"version":1,"maximumInProgress":4,"retain":20,"retainFor":"1d12h","logMax":"10MiB"}`,
		`{"version":1,"maximumInProgress":4,"retainFor":"1.5h","logMax":"1.5MB"}`,
		"",
		"null",
		"[]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := DecodeConfig(data)
		if err != nil {
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Fatalf("DecodeConfig returned %+v with error %v", cfg, err)
			}
			return
		}
		if cfg.Version != ConfigVersion || cfg.MaximumInProgress < 1 {
			t.Fatalf("DecodeConfig accepted an invalid config %+v", cfg)
		}
		b, err := cfg.Encode()
		if err != nil {
			t.Fatal(err)
		}
		cfg2, err := DecodeConfig(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if !reflect.DeepEqual(cfg2, cfg) {
			t.Fatalf("round trip changed the config: %+v vs %+v", cfg, cfg2)
		}
	})
}
