package runlog

import "github.com/crew-dev/crew/internal/record"

// What the tests (package runlog_test, which makes whole state roots with
// package runstore) look at inside.

var (
	CapGeometry = capGeometry
	DropMarker  = dropMarker
	ParseMarker = parseMarker
	LogName     = logName
	TailDirName = tailDirName
	PieceName   = pieceName
)

const MinPieceBytes = minPieceBytes

// Piece is a piece of a capped log's tail, as a reader finds it.
type Piece struct{ Off, Size int64 }

// ListPieces lists run id's pieces, oldest first.
func ListPieces(l *Logs, id record.RunID) ([]Piece, error) {
	ps, err := l.listPieces(id)
	out := make([]Piece, len(ps))
	for i, p := range ps {
		out[i] = Piece{Off: p.off, Size: p.size}
	}
	return out, err
}

// Crash leaves w as a crash would: its files closed, nothing put
// together.
func Crash(w *Writer) {
	w.cur.Close()
	w.head.Close()
}
