package record

import "testing"

func TestStopRequestRequester(t *testing.T) {
	uid := func(n int) *int { return &n }
	const alice, bob = 1000, 1001
	cases := []struct {
		name   string
		req    StopRequest
		owner  int
		want   int
		wantOK bool
	}{
		{"not read from a file", StopRequest{}, alice, -1, false},
		{"the run's own user", StopRequest{FileUID: uid(alice)}, alice, alice, true},
		{"root", StopRequest{FileUID: uid(0)}, alice, 0, true},
		{"another member", StopRequest{FileUID: uid(bob)}, alice, bob, false},
		{"another member, of root's run", StopRequest{FileUID: uid(bob)}, 0, bob, false},
		{"acknowledged for root", StopRequest{FileUID: uid(alice), Ack: &StopAck{RequesterUID: uid(0)}}, alice, 0, true},
		{"acknowledged before requesters were noted", StopRequest{FileUID: uid(alice), Ack: &StopAck{}}, alice, alice, true},
		{"an acknowledgement forged by another member", StopRequest{FileUID: uid(bob), Ack: &StopAck{RequesterUID: uid(0)}}, alice, bob, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := c.req.Requester(c.owner)
			if got != c.want || ok != c.wantOK {
				t.Errorf("Requester(%d) = %d, %v; want %d, %v", c.owner, got, ok, c.want, c.wantOK)
			}
		})
	}
}

func TestMayStop(t *testing.T) {
	for _, c := range []struct {
		uid, owner int
		want       bool
	}{{1000, 1000, true}, {0, 1000, true}, {1001, 1000, false}, {1000, 0, false}, {0, 0, true}} {
		if got := MayStop(c.uid, c.owner); got != c.want {
			t.Errorf("MayStop(%d, %d) = %v, want %v", c.uid, c.owner, got, c.want)
		}
	}
}
