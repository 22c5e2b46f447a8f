package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// chaosUpstream records every request it receives (an admission): the
// tenant (X-Quotagate-Tenant), the route (the first path segment), when it
// arrived and ended, whether the gateway closed it first, and the units it
// took. What it does:
//
//	/tb/...            answers at once
//	/cc/<ms>           works ms, then answers (ends early if the gateway leaves)
//	/cc/stream/<ms>    streams a line every 50 ms for ms
//	/cost/...          reads the body and answers with the usage the caller
//	                   asked for (X-Chaos-Usage) in X-Usage-Total-Tokens; a
//	                   body that breaks off takes the reservation (X-Max-Tokens)
type chaosUpstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	rec []chaosAdmit
}

func startChaosUpstream(t testing.TB) *chaosUpstream {
	u := &chaosUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u
}

func (u *chaosUpstream) serve(w http.ResponseWriter, r *http.Request) {
	a := chaosAdmit{Tenant: r.Header.Get("X-Quotagate-Tenant"), At: time.Now(), Cost: 1}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	a.Route = parts[0]
	defer func() {
		a.End = time.Now()
		u.mu.Lock()
		u.rec = append(u.rec, a)
		u.mu.Unlock()
	}()
	last, _ := strconv.Atoi(parts[len(parts)-1])
	switch a.Route {
	case "cc":
		if len(parts) > 2 && parts[1] == "stream" {
			end := time.Now().Add(time.Duration(last) * time.Millisecond)
			for time.Now().Before(end) {
				if _, err := io.WriteString(w, "tick\n"); err != nil {
					a.Cancelled = true
					return
				}
				_ = http.NewResponseController(w).Flush()
				select {
				case <-r.Context().Done():
					a.Cancelled = true
					return
				case <-time.After(50 * time.Millisecond): // the stream's pace
				}
			}
		} else {
			select {
			case <-r.Context().Done():
				a.Cancelled = true
				return
			case <-time.After(time.Duration(last) * time.Millisecond): // the upstream's work
			}
		}
	case "cost":
		reserve, _ := strconv.ParseInt(r.Header.Get("X-Max-Tokens"), 10, 64)
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			a.Cost, a.Cancelled = reserve, true
			return
		}
		usage, _ := strconv.ParseInt(r.Header.Get("X-Chaos-Usage"), 10, 64)
		a.Cost = usage
		w.Header().Set("X-Usage-Total-Tokens", strconv.FormatInt(usage, 10))
	}
	_, _ = io.WriteString(w, "ok\n")
}

// record returns a copy of the admissions so far.
func (u *chaosUpstream) record() []chaosAdmit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]chaosAdmit(nil), u.rec...)
}

// chaosCaller sends requests to the fleet and logs what each came to.
type chaosCaller struct {
	fleet *chaosFleet
	// plant, when set, is the gateway of the planted build
	// (startPlantGateway) that plantTenant's plantRoute requests go to.
	plant *chaosInstance
	// home, when set, gives the place a request must go to (on the
	// regions topology, its region's gateway), or -1 for any.
	home   func(q chaosReq) int
	client *http.Client
	mu     sync.Mutex
	calls  []chaosCall
}

// pick returns the gateway q goes to: its home place's instance (nil
// while it is replaced: then the caller sends nothing), or the n-th
// running one.
func (c *chaosCaller) pick(q chaosReq, n int) *chaosInstance {
	if c.plant != nil && q.tenant == plantTenant && q.route == plantRoute {
		return c.plant
	}
	if c.home != nil {
		if k := c.home(q); k >= 0 {
			return c.fleet.at(k)
		}
	}
	return c.fleet.pick(n)
}

// chaosReq is one request a caller sends.
type chaosReq struct {
	tenant, route, path string
	header              map[string]string
	// region is the region a request of the cross-region tenant is sent
	// in (the regions topology).
	region int
}

// send sends q to the next gateway of the fleet (see pick) and logs the
// outcome, with the gateway instance it went to.
func (c *chaosCaller) send(q chaosReq, n int) chaosCall {
	gw := c.pick(q, n)
	if gw == nil {
		return chaosCall{}
	}
	cc := chaosCall{Tenant: q.tenant, Route: q.route, Start: time.Now()}
	method := http.MethodGet
	if q.route == "cost" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, gw.url+q.path, nil)
	if err == nil {
		req.Header.Set("X-API-Key", "key-"+q.tenant)
		for k, v := range q.header {
			req.Header.Set(k, v)
		}
		var resp *http.Response
		if resp, err = c.client.Do(req); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil {
				cc.Status = resp.StatusCode
			}
		}
	}
	cc.End = time.Now()
	if err != nil {
		cc.Err = err.Error()
	}
	c.fleet.noteCall(gw, &cc)
	c.mu.Lock()
	c.calls = append(c.calls, cc)
	c.mu.Unlock()
	return cc
}

// stallBody opens a connection to a gateway, sends a cost request whose
// body stops after 10 of its 100 bytes, and logs the answer (408 once the
// gateway's body_read_timeout passes, or a denial before the body is read).
func (c *chaosCaller) stallBody(tenant string, n int, wait time.Duration) {
	gw := c.pick(chaosReq{tenant: tenant, route: "cost"}, n)
	if gw == nil {
		return
	}
	cc := chaosCall{Tenant: tenant, Route: "stall", Start: time.Now()}
	defer func() {
		cc.End = time.Now()
		c.fleet.noteCall(gw, &cc)
		c.mu.Lock()
		c.calls = append(c.calls, cc)
		c.mu.Unlock()
	}()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(gw.url, "http://"), 2*time.Second)
	if err != nil {
		cc.Err = err.Error()
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	head := fmt.Sprintf("POST /cost/stall HTTP/1.1\r\nHost: chaos\r\nX-API-Key: key-%s\r\nX-Max-Tokens: 10\r\nX-Chaos-Usage: 1\r\nContent-Length: 100\r\n\r\n0123456789", tenant)
	if _, err := io.WriteString(conn, head); err != nil {
		cc.Err = err.Error()
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		cc.Err = err.Error()
		return
	}
	resp.Body.Close()
	cc.Status = resp.StatusCode
}

// hangUp asks a concurrency route for a stream and hangs up after its
// first line: the slot must come back. Not logged as a call (it wants no
// answer).
func (c *chaosCaller) hangUp(tenant string, n int) {
	gw := c.pick(chaosReq{tenant: tenant, route: "cc"}, n)
	if gw == nil {
		return
	}
	req, err := http.NewRequest(http.MethodGet, gw.url+"/cc/stream/2000", nil)
	if err != nil {
		return
	}
	req.Header.Set("X-API-Key", "key-"+tenant)
	resp, err := c.client.Do(req)
	if err != nil {
		return
	}
	_, _ = bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close() // mid-stream
}

// log returns a copy of the calls so far.
func (c *chaosCaller) log() []chaosCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chaosCall(nil), c.calls...)
}
