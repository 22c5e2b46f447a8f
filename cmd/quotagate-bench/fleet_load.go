package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// fleetMix is who sends the fleet's requests: the enterprise tenant a
// share of them, the abusive caller another, and the rest free users
// 0..callers-1 drawn from a Zipf distribution (s = 1.1, as the zipf key mix).
type fleetMix struct {
	callers         int
	enterpriseShare float64
	abusiveShare    float64
}

// fleetPicker draws callers for one worker; not safe for concurrent use.
type fleetPicker struct {
	mix  fleetMix
	rng  *rand.Rand
	zipf *rand.Zipf
}

func newFleetPicker(mix fleetMix, seed uint64) *fleetPicker {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	return &fleetPicker{mix: mix, rng: r, zipf: rand.NewZipf(r, 1.1, 1, uint64(mix.callers-1))}
}

// pick returns the next caller's class and, for a free user, its number.
func (p *fleetPicker) pick() (keyClass, int) {
	u := p.rng.Float64()
	switch {
	case u < p.mix.enterpriseShare:
		return classEnterprise, 0
	case u < p.mix.enterpriseShare+p.mix.abusiveShare:
		return classAbusive, 0
	}
	return classFree, int(p.zipf.Uint64())
}

// tokenMaker signs the HS256 JWTs the callers present; not safe for
// concurrent use. A token costs one HMAC-SHA256 of about 100 bytes.
type tokenMaker struct {
	mac    hash.Hash
	header string // base64url of the JOSE header, with the dot
	exp    string
	buf    []byte
}

func newTokenMaker() *tokenMaker {
	return &tokenMaker{
		mac:    hmac.New(sha256.New, []byte(fleetSecret)),
		header: base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + ".",
		exp:    strconv.FormatInt(time.Now().Add(24*time.Hour).Unix(), 10),
	}
}

// bearer returns "Bearer <JWT>" for tenant sub of tier.
func (t *tokenMaker) bearer(sub, tier string) string {
	claims := `{"sub":"` + sub + `","tier":"` + tier + `","exp":` + t.exp + `}`
	b := append(t.buf[:0], "Bearer "...)
	b = append(b, t.header...)
	b = base64.RawURLEncoding.AppendEncode(b, []byte(claims))
	t.mac.Reset()
	t.mac.Write(b[len("Bearer "):])
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, t.mac.Sum(nil))
	t.buf = b
	return string(b)
}

// classCounts is what one class of callers got.
type classCounts struct {
	requests, ok, limited, other uint64
}

// perKey counts, for every caller, its requests and admissions, and what
// an exact token bucket of the caller's limit admits of the same requests
// at the instants they were sent. Callers 0..callers-1 are the free
// users, then the enterprise tenant, then the abusive caller. Safe for
// concurrent use.
type perKey struct {
	callers         int
	entRate         float64
	requests, ok    []uint32
	exact           []uint32
	tokens          []float64       // the exact bucket's level, from the first request on
	last            []time.Duration // when the exact bucket was last updated
	locks           [256]sync.Mutex // by caller number
	enterprise, abu int             // the numbers of the enterprise tenant and the abusive caller
}

func newPerKey(callers, entRate int) *perKey {
	n := callers + 2
	return &perKey{
		callers: callers, entRate: float64(entRate), enterprise: callers, abu: callers + 1,
		requests: make([]uint32, n), ok: make([]uint32, n), exact: make([]uint32, n),
		tokens: make([]float64, n), last: make([]time.Duration, n),
	}
}

func (p *perKey) reset() {
	clear(p.requests)
	clear(p.ok)
	clear(p.exact)
}

// limit returns the rate per second and burst of caller id.
func (p *perKey) limit(id int) (rate, burst float64) {
	if id == p.enterprise {
		return p.entRate, p.entRate
	}
	return freeRate, freeBurst
}

// sent counts a request of caller id sent at at (since the run began) and
// runs the exact bucket: full at the caller's first request, refilled at
// its rate, one unit per request.
func (p *perKey) sent(id int, at time.Duration) {
	rate, burst := p.limit(id)
	m := &p.locks[id%len(p.locks)]
	m.Lock()
	if p.requests[id] == 0 {
		p.tokens[id] = burst
	} else {
		p.tokens[id] = min(burst, p.tokens[id]+rate*(at-p.last[id]).Seconds())
	}
	p.last[id] = at
	p.requests[id]++
	if p.tokens[id] >= 1 {
		p.tokens[id]--
		p.exact[id]++
	}
	m.Unlock()
}

// admitted counts an admission of caller id.
func (p *perKey) admitted(id int) { atomic.AddUint32(&p.ok[id], 1) }

// fleetLoad is the result of driving a fleet.
type fleetLoad struct {
	elapsed time.Duration
	classes [numClasses]classCounts
	errors  map[string]uint64 // answers other than 200 and 429, by errorKind
}

// discardWriter is a ResponseWriter that keeps only the status, so that the
// load generator costs the gateway nothing but the call.
type discardWriter struct {
	h    http.Header
	code int
	body []byte // of an answer other than 200 and 429
}

func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	if d.code != http.StatusOK && d.code != http.StatusTooManyRequests && len(d.body) < 4096 {
		d.body = append(d.body, p...) // a problem+json error: kept to name it
	}
	return len(p), nil
}

// errorKind names an answer other than 200 and 429: its status and the
// "error" member of its problem+json body ("503 limiter_unavailable").
func (d *discardWriter) errorKind() string {
	var problem struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(d.body, &problem) != nil || problem.Error == "" {
		problem.Error = "(no problem body)"
	}
	return strconv.Itoa(d.code) + " " + problem.Error
}
func (d *discardWriter) WriteHeader(c int) {
	if d.code == 0 {
		d.code = c
	}
}

// driveFleet sends requests from workers closed-loop goroutines, each
// calling an instance's handler in-process with its next request as soon
// as the previous one is answered, for d: the instance pick returns for
// the caller (nil: one chosen uniformly). Per-caller counts go to keys. A
// request in flight at the deadline is completed and counted; elapsed runs
// to the last completion.
func driveFleet(ctx context.Context, handlers []http.Handler, mix fleetMix, workers int, d time.Duration, keys *perKey,
	pick func(r *rand.Rand, class keyClass, id int) int) *fleetLoad {
	if pick == nil {
		pick = func(r *rand.Rand, _ keyClass, _ int) int { return r.IntN(len(handlers)) }
	}
	res := &fleetLoad{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine [numClasses]classCounts
			var errs map[string]uint64
			picker := newFleetPicker(mix, uint64(w)+1)
			tokens := newTokenMaker()
			freeSub := make([]byte, 0, 16)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				class, id := picker.pick()
				instance := pick(picker.rng, class, id)
				var auth string
				switch class {
				case classEnterprise:
					auth, id = tokens.bearer(enterpriseID, "enterprise"), keys.enterprise
				case classAbusive:
					auth, id = tokens.bearer(abusiveID, "free"), keys.abu
				default:
					freeSub = strconv.AppendInt(append(freeSub[:0], 'u'), int64(id), 10)
					auth = tokens.bearer(string(freeSub), "free")
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://fleet.bench"+requestURI, nil)
				if err != nil {
					panic(err) // a constant URL
				}
				req.RequestURI = requestURI
				req.RemoteAddr = "10.0.0.1:40000"
				req.Header["Authorization"] = []string{auth}
				rw := &discardWriter{h: http.Header{}}
				keys.sent(id, time.Since(start))
				handlers[instance].ServeHTTP(rw, req)
				c := &mine[class]
				c.requests++
				switch rw.code {
				case http.StatusOK:
					c.ok++
				case http.StatusTooManyRequests:
					c.limited++
				default:
					c.other++
					if errs == nil {
						errs = map[string]uint64{}
					}
					errs[rw.errorKind()]++
				}
				if rw.code == http.StatusOK {
					keys.admitted(id)
				}
			}
			mu.Lock()
			for i := range mine {
				res.classes[i].requests += mine[i].requests
				res.classes[i].ok += mine[i].ok
				res.classes[i].limited += mine[i].limited
				res.classes[i].other += mine[i].other
			}
			for k, n := range errs {
				if res.errors == nil {
					res.errors = map[string]uint64{}
				}
				res.errors[k] += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// generatorCost is the load generator's CPU per request, in µs: the
// workers run for 300 ms against handlers that answer 200 at once, and
// this process's CPU time is divided by the requests. keys is written to.
func generatorCost(ctx context.Context, mix fleetMix, workers int, keys *perKey) (float64, error) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	before, err := selfTicks()
	if err != nil {
		return 0, err
	}
	load := driveFleet(ctx, []http.Handler{ok}, mix, workers, 300*time.Millisecond, keys, nil)
	after, err := selfTicks()
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range load.classes {
		n += c.requests
	}
	if n == 0 {
		return 0, nil
	}
	return ticksToMicros(after-before) / float64(n), nil
}
