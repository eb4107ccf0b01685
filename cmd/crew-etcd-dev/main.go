//go:build etcd

// Command crew-etcd-dev runs a single-member etcd server on loopback, for
// trying crew's etcd store on one machine (docs/etcd.md). It is no
// production etcd: run a real cluster for that.
//
//	go run -tags etcd ./cmd/crew-etcd-dev            # serves 127.0.0.1:2379 until Ctrl-C
//	go run -tags etcd ./cmd/crew-etcd-dev -listen 127.0.0.1:23790 -data /tmp/etcd-dev
package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:2379", "client address (loopback)")
	peer := flag.String("peer", "127.0.0.1:2380", "peer address (loopback)")
	data := flag.String("data", "", "data directory (default: a new temporary directory, removed at exit)")
	flag.Parse()
	if err := run(*listen, *peer, *data); err != nil {
		fmt.Fprintln(os.Stderr, "crew-etcd-dev:", err)
		os.Exit(1)
	}
}

func run(listen, peer, data string) error {
	for _, a := range []string{listen, peer} {
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
	cfg := embed.NewConfig()
	cfg.Dir = data
	// "error" would still print etcd's own complaints about closing
	// its listeners at Ctrl-C.
	cfg.LogLevel = "fatal"
	cu, pu := url.URL{Scheme: "http", Host: listen}, url.URL{Scheme: "http", Host: peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return fmt.Errorf("etcd did not become ready within a minute")
	}
	fmt.Printf("etcd serving on %s (data in %s); use crew with --store etcd://%s/PREFIX; Ctrl-C stops it\n", listen, data, listen)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	select {
	case <-sigs:
	case err := <-e.Err():
		return err
	}
	return nil
}
