//go:build etcd

package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/crew-dev/crew/internal/leaseguard"
)

// DefaultLeaseTTL is a run lease's TTL: how long a slot outlives a
// supervisor that stopped renewing it (died, froze, lost etcd).
const DefaultLeaseTTL = 10 * time.Second

// MinLeaseTTL is the shortest TTL crew asks for: renewals go out every
// fifth of it, and a shorter lease would expire on one slow round trip.
const MinLeaseTTL = 2 * time.Second

// lease is this process's etcd lease: the owner key of its run and its
// queue ticket are attached to it.
//
// What it knows is when the lease is valid until, by this host's monotonic
// clock: a renewal sent at t and answered with TTL d keeps the lease on the
// server until at least t+d, because the server started its TTL when the
// request arrived, after t. So validUntil is a lower bound on the lease's
// real expiry, whatever the network did; leaseguard uses it to kill the
// command before that instant.
type lease struct {
	f   *Fleet
	id  clientv3.LeaseID
	ttl time.Duration

	mu          sync.Mutex
	validUntil  time.Duration // monotonic
	lastContact time.Duration // monotonic: the send time of the last renewal answered
	gone        bool          // etcd said the lease no longer exists
	handedOver  bool          // another process renews it now (--detach)
	guard       *attemptGuard // the running attempt's, told of every renewal

	stop chan struct{}
	done chan struct{}
	// expired is closed once the lease is known gone: etcd said so, or
	// validUntil passed without a renewal.
	expired     chan struct{}
	expiredOnce sync.Once
	releaseOnce sync.Once
}

// grantBy creates a lease of ttl and starts renewing it, asked no later
// than deadline (zero: none); limit is what an error says etcd had to
// answer in.
func (f *Fleet) grantBy(ttl time.Duration, deadline time.Time, limit time.Duration) (*lease, error) {
	if ttl < MinLeaseTTL {
		ttl = MinLeaseTTL
	}
	ctx, cancel := f.ctxBy(deadline)
	defer cancel()
	sent := leaseguard.Monotonic()
	resp, err := f.cli.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return nil, f.wrapWithin("grant a lease", err, limit)
	}
	granted := time.Duration(resp.TTL) * time.Second
	l := &lease{f: f, id: resp.ID, ttl: granted, validUntil: sent + granted, lastContact: sent,
		stop: make(chan struct{}), done: make(chan struct{}), expired: make(chan struct{})}
	go l.renew()
	return l, nil
}

// grantPatiently grants a lease, trying again for up to patience while
// etcd does not answer (a leader change); no request outlives patience.
func (f *Fleet) grantPatiently(ttl, patience time.Duration) (*lease, error) {
	give := time.Now().Add(patience)
	for {
		l, err := f.grantBy(ttl, give, patience)
		var down *UnavailableError
		if err == nil || !errors.As(err, &down) || !pause(give) {
			return l, err
		}
	}
}

// pause waits a moment before etcd is asked again, and reports whether
// there is time left before give to ask.
func pause(give time.Time) bool {
	left := time.Until(give)
	if left <= 0 {
		return false
	}
	time.Sleep(min(250*time.Millisecond, left))
	return time.Now().Before(give)
}

// margin is how long before validUntil the command must be dead: room for
// the kill to take effect and for the two clocks' rates to differ.
func (l *lease) margin() time.Duration {
	return max(300*time.Millisecond, l.ttl/10)
}

// freshFor is how long before its deadline a lease must still be for an
// attempt to start on it: half the TTL, twice what the supervisor's
// monitor leaves a command it stops (a quarter). A lease renewed as it
// should be (every fifth of the TTL) is; one unrenewed for longer than
// half its TTL less the margin (4 s of 10 s) is not, and an attempt waits
// for a renewal rather than start on it (a retry after a partition): its guard's deadline could pass while the command is being
// started, and a command that joins a dead guard's group would run on
// with nothing to stop it with the lease.
func (l *lease) freshFor() time.Duration { return l.ttl / 2 }

// Fresh reports whether the lease is certainly valid long enough for an
// attempt to be started on it.
func (l *lease) Fresh() bool {
	return !l.lost() && !l.hasExpired() && l.deadline()-leaseguard.Monotonic() >= l.freshFor()
}

// deadline is when the command must be dead by (monotonic).
func (l *lease) deadline() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil - l.margin()
}

// sinceContact is how long since etcd last renewed the lease.
func (l *lease) sinceContact() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return leaseguard.Monotonic() - l.lastContact
}

// setGuard makes g the guard that hears of renewals (nil: none).
func (l *lease) setGuard(g *attemptGuard) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.guard = g
}

// renew keeps the lease alive: a renewal every fifth of the TTL, each
// bounded by that interval, so that a lost connection costs at most one
// interval of validity before the next try.
func (l *lease) renew() {
	defer close(l.done)
	every := l.ttl / 5
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if leaseguard.Monotonic() >= l.deadline()+l.margin() {
			l.markExpired()
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		sent := leaseguard.Monotonic()
		resp, err := l.f.cli.KeepAliveOnce(ctx, l.id)
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && resp.TTL <= 0):
			l.mu.Lock()
			l.gone = true
			l.mu.Unlock()
			l.markExpired()
			return
		case err != nil:
			continue // no answer: validUntil stays where it was
		}
		l.mu.Lock()
		if v := sent + time.Duration(resp.TTL)*time.Second; v > l.validUntil {
			l.validUntil = v
		}
		l.lastContact = sent
		d := l.validUntil - l.margin()
		g := l.guard
		l.mu.Unlock()
		if g != nil {
			g.extend(d)
		}
	}
}

func (l *lease) markExpired() { l.expiredOnce.Do(func() { close(l.expired) }) }

// hasExpired reports whether the lease is known gone, by etcd's word or
// because it went unrenewed past its validity.
func (l *lease) hasExpired() bool {
	select {
	case <-l.expired:
		return true
	default:
		return false
	}
}

// lost reports whether etcd said the lease is gone.
func (l *lease) lost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gone
}

// release stops renewing and revokes the lease: its owner key and ticket
// go at once instead of after the TTL.
func (l *lease) release() {
	l.releaseOnce.Do(func() { close(l.stop) })
	<-l.done
	l.mu.Lock()
	handedOver := l.handedOver
	l.mu.Unlock()
	if handedOver {
		return
	}
	ctx, cancel := l.f.ctx()
	defer cancel()
	_, _ = l.f.cli.Revoke(ctx, l.id) // if this fails, the TTL does the same
}

func (l *lease) String() string { return fmt.Sprintf("lease %x (TTL %s)", int64(l.id), l.ttl) }

// handOver stops renewing the lease without revoking it: another process
// renews it now.
func (l *lease) handOver() {
	l.mu.Lock()
	l.handedOver = true
	l.mu.Unlock()
}

// adopt takes over a lease another process granted, and renews it. Its
// validity is known only from a renewal this process sends.
func (f *Fleet) adopt(id clientv3.LeaseID) (*lease, error) {
	ctx, cancel := f.ctx()
	defer cancel()
	sent := leaseguard.Monotonic()
	resp, err := f.cli.KeepAliveOnce(ctx, id)
	if err != nil {
		return nil, f.wrap(fmt.Sprintf("take over lease %x", int64(id)), err)
	}
	ttl := time.Duration(resp.TTL) * time.Second
	ttlResp, err := f.cli.TimeToLive(ctx, id)
	if err == nil && ttlResp.GrantedTTL > 0 {
		ttl = time.Duration(ttlResp.GrantedTTL) * time.Second
	}
	l := &lease{f: f, id: id, ttl: ttl, validUntil: sent + time.Duration(resp.TTL)*time.Second, lastContact: sent,
		stop: make(chan struct{}), done: make(chan struct{}), expired: make(chan struct{})}
	go l.renew()
	return l, nil
}
