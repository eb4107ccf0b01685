//go:build etcd

// Command crew-etcd-dev runs an etcd server on loopback, for trying crew's
// etcd store on one machine (docs/etcd.md): one
// member, or a cluster of several in one process (a comma-separated
// -listen and -peer, one address each per member). It is no production
// etcd: run a real cluster for that.
//
//	go run -tags etcd ./cmd/crew-etcd-dev            # serves 127.0.0.1:2379 until Ctrl-C
//	go run -tags etcd ./cmd/crew-etcd-dev -listen 127.0.0.1:23790 -data /tmp/etcd-dev
//	go run -tags etcd ./cmd/crew-etcd-dev -listen 127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792 \
//	    -peer 127.0.0.1:23800,127.0.0.1:23801,127.0.0.1:23802   # three members
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:2379", "client address (loopback); comma-separated, one per member")
	peer := flag.String("peer", "127.0.0.1:2380", "peer address (loopback); comma-separated, one per member")
	data := flag.String("data", "", "data directory (default: a new temporary directory, removed at exit)")
	flag.Parse()
	if err := run(strings.Split(*listen, ","), strings.Split(*peer, ","), *data); err != nil {
		fmt.Fprintln(os.Stderr, "crew-etcd-dev:", err)
		os.Exit(1)
	}
}

func run(listen, peer []string, data string) error {
	if len(listen) != len(peer) {
		return fmt.Errorf("%d client addresses but %d peer addresses: give one of each per member", len(listen), len(peer))
	}
	for _, a := range append(append([]string{}, listen...), peer...) {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("%s: this development server listens on loopback only", a)
		}
	}
	if data == "" {
		dir, err := os.MkdirTemp("", "crew-etcd-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		data = dir
	}
	var initial []string
	for i, p := range peer {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, p))
	}
	var members []*embed.Etcd
	defer func() {
		for _, e := range members {
			e.Close()
		}
	}()
	// Every member starts before any is ready: the first needs a quorum.
	for i := range listen {
		e, err := embed.StartEtcd(config(i, listen[i], peer[i], filepath.Join(data, fmt.Sprintf("m%d", i)), initial))
		if err != nil {
			return err
		}
		members = append(members, e)
	}
	errs := make(chan error, len(members))
	for _, e := range members {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(time.Minute):
			return errors.New("etcd did not become ready within a minute")
		}
		go func() { errs <- <-e.Err() }()
	}
	eps := strings.Join(listen, ",")
	fmt.Printf("etcd serving on %s (data in %s); use crew with --store etcd://%s/PREFIX; Ctrl-C stops it\n", eps, data, eps)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sigs:
	case err := <-errs:
		return err
	}
	return nil
}

// config is member i's.
func config(i int, listen, peer, dir string, initial []string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = fmt.Sprintf("m%d", i)
	cfg.Dir = dir
	// "error" would still print etcd's own complaints about closing
	// its listeners at Ctrl-C.
	cfg.LogLevel = "fatal"
	cu, pu := url.URL{Scheme: "http", Host: listen}, url.URL{Scheme: "http", Host: peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = strings.Join(initial, ",")
	return cfg
}
