//go:build etcd

package e2e

// A TCP proxy on 127.0.0.1 in front of one etcd member, to partition one
// crew process from etcd: cut closes every proxied connection and from
// then on accepts new ones only to hold them, reading nothing and
// forwarding nothing (a black hole, as a dead network looks to a client
// that has to time out); heal forwards again and drops the held ones so
// that their clients reconnect.

import (
	"io"
	"net"
	"sync"
	"testing"
)

type tcpProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	refuse bool                  // while cut: close new connections at once, as a host that is down does
	conns  map[net.Conn]struct{} // proxied: both sides
	held   []net.Conn            // accepted while cut
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut && p.refuse {
			p.mu.Unlock()
			c.Close()
			continue
		}
		if p.cut {
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			// Cut while dialling: hold it like the others.
			up.Close()
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Add(2)
		go pipe(up, c)
		go pipe(c, up)
	}
}

// partition stops forwarding: every proxied connection is closed, new ones
// are held without an answer.
func (p *tcpProxy) partition() { p.stop(false) }

// down closes every proxied connection and, until heal, every new one at
// once: the member behind it looks crashed.
func (p *tcpProxy) down() { p.stop(true) }

func (p *tcpProxy) stop(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.refuse = true, refuse
	for c := range p.conns {
		c.Close()
	}
}

// heal forwards new connections again and closes the held ones.
func (p *tcpProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.refuse = false, false
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
	p.mu.Unlock()
	p.wg.Wait()
}
