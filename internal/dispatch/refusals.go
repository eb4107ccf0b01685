package dispatch

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"time"

	"github.com/crew-dev/crew/internal/runstore"
)

// refusalsLogLimit bounds refusals.log; past it the log starts over, so
// recording a refusal stays one small append.
const refusalsLogLimit = 1 << 20

// Refusal is a start that was not admitted, as `crew status TASK` shows it.
type Refusal struct {
	At       time.Time `json:"at"`
	Task     string    `json:"task"`
	Reason   string    `json:"reason"`
	ExitCode int       `json:"exitCode"`
	PID      int       `json:"pid"`
}

// recordRefusal appends a refusal to refusals.log: one O_APPEND write of
// one line, no fsync — it is a diagnostic, not a record, and must never
// slow admission down.
func (d *Dispatcher) recordRefusal(task string, e *RefusedError) {
	code := 75
	if e.Kind == TaskActive {
		code = 76
	}
	line, err := json.Marshal(Refusal{At: d.now(), Task: task, Reason: e.Error(), ExitCode: code, PID: os.Getpid()})
	if err != nil {
		return
	}
	path := d.Store.RefusalsPath()
	if fi, err := os.Stat(path); err == nil && fi.Size() > refusalsLogLimit {
		_ = os.Rename(path, path+".1")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, runstore.FilePerm)
	if err != nil {
		return
	}
	_, _ = f.Write(append(line, '\n'))
	_ = f.Close()
}

// LastRefusal is the task's most recent refusal, if any.
func (d *Dispatcher) LastRefusal(task string) *Refusal {
	for _, path := range []string{d.Store.RefusalsPath(), d.Store.RefusalsPath() + ".1"} {
		if r := lastRefusalIn(path, task); r != nil {
			return r
		}
	}
	return nil
}

func lastRefusalIn(path, task string) *Refusal {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 2*refusalsLogLimit))
	if err != nil {
		return nil
	}
	lines := bytes.Split(data, []byte{'\n'})
	for i := len(lines) - 1; i >= 0; i-- {
		var r Refusal
		if json.Unmarshal(lines[i], &r) == nil && r.Task == task {
			return &r
		}
	}
	return nil
}
