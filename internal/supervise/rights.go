package supervise

import (
	"errors"
	"fmt"
	"slices"

	"github.com/crew-dev/crew/internal/record"
	"github.com/crew-dev/crew/internal/runstore"
	"github.com/crew-dev/crew/internal/vocab"
)

// Whose stop requests a supervisor carries out. It signals its command
// with its own rights, so it lends them to no one the kernel would not let
// signal the command: only the run's own user (the user this supervisor
// runs as) and root. Who asked is what the kernel says, the owner of the
// request file (record.StopRequest.Requester), never what the file says:
// in a state root shared with a group, every member can write one.

// maxRefusedStopNotes bounds how many refused stop requests a run notes:
// each note is a write of its record, and whoever writes the requests can
// write them as fast as they like.
const maxRefusedStopNotes = 3

// refusedStop tells refused requests apart, so that one request file read
// more than once (before the launch, then by the wait loop) is noted once.
type refusedStop struct {
	uid    int
	pid    int
	at     int64 // UnixNano: a time decoded twice may differ in its *Location
	signal string
}

// mayAct reports whether req may be carried out for this run. A request
// that may not is refused: nothing is signalled, and the user and the
// run's record hear of it (refuseStop).
func (s *supervisor) mayAct(req *record.StopRequest) bool {
	uid, ok := req.Requester(s.uid)
	if !ok {
		s.refuseStop(req, uid)
	}
	return ok
}

// requesterOf is who asked for req, which mayAct allowed: for the
// acknowledgement, after which the file's owner is this supervisor's user.
func (s *supervisor) requesterOf(req *record.StopRequest) *int {
	uid, _ := req.Requester(s.uid)
	return &uid
}

// stopRequestOfRight is the run's stop request if it may be believed
// (written by the run's own user or root), else nil: who stopped a run is
// told only from such a request.
func (s *supervisor) stopRequestOfRight() *record.StopRequest {
	req := s.Run.ReadStopRequest()
	if req == nil {
		return nil
	}
	if _, ok := req.Requester(s.uid); !ok {
		return nil
	}
	return req
}

// refuseStop warns about a refused request and notes it in the run's
// record (written at once while the command runs, so that crew status
// shows it), once per request and at most maxRefusedStopNotes times.
func (s *supervisor) refuseStop(req *record.StopRequest, uid int) {
	sig := vocab.SignalName(RequestedSignal(req))
	key := refusedStop{uid: uid, pid: req.PID, at: req.At.UnixNano(), signal: sig}
	if slices.Contains(s.refused, key) || len(s.refused) >= maxRefusedStopNotes {
		return
	}
	s.refused = append(s.refused, key)
	msg := fmt.Sprintf("refused a stop request (%s) written by %s: run %s belongs to %s, and only its own user or root may stop it; nothing was signalled",
		sig, runstore.UserName(uid), s.rec.RunID, runstore.UserName(s.uid))
	s.Warn(errors.New(msg))
	s.rec.AddEvent(s.now(), "%s", msg)
	if s.rec.State != record.Running {
		return // provisioning: the record is written when the command starts
	}
	if err := s.Run.Update(s.rec); err != nil {
		s.Warn(fmt.Errorf("run %s: %w", s.rec.RunID, err))
	}
}
