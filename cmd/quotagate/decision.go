package main

import (
	"context"
	"net"
	"time"

	"github.com/quotagate/quotagate/config"
)

// decisionService is the running rls section: its server, listeners and
// the store it owns.
type decisionService struct {
	srv        rlsServer
	grpc, http net.Listener
	closeStore func() error
}

// rlsServer is what serve needs of an *rls.Server; an interface so that a
// build without the decision service (-tags norls) links none of it.
type rlsServer interface {
	Serve(ctx context.Context, grpcLn, httpLn net.Listener, drain time.Duration) error
	ReloadFile(path string) error
	Watch(ctx context.Context, path string, interval time.Duration, loaded config.Digest)
}

// close releases a decision service that will not serve: its listeners and
// its store. A nil service (the section is off) has nothing to release.
func (ds *decisionService) close() {
	if ds == nil {
		return
	}
	for _, l := range []net.Listener{ds.grpc, ds.http} {
		if l != nil { // a listener that is off is nil
			l.Close()
		}
	}
	_ = ds.closeStore()
}
