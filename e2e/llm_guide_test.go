package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/internal/doccheck"
)

// guideConfig returns the first `yaml config` block of the LLM guide, the
// configuration it tells a reader to save as llm.yaml, with its upstream
// pointed at upstreamURL.
func guideConfig(t *testing.T, upstreamURL string) string {
	t.Helper()
	block, err := doccheck.LLMGuideConfig("..")
	if err != nil {
		t.Fatal(err)
	}
	const guideUpstream = `"http://127.0.0.1:8000"`
	if !strings.Contains(block, guideUpstream) {
		t.Fatalf("the guide's config no longer names the upstream %s", guideUpstream)
	}
	return strings.Replace(block, guideUpstream, strconv.Quote(upstreamURL), 1)
}

// TestLLMGuideWithOpenAISDK runs the LLM guide's configuration as written
// (only its ports, its upstream and, for Redis and a 3-primary Cluster,
// its store moved)
// and drives it with the Node openai SDK: a stream settles from its usage
// chunk; a burst on the free tier is admitted up to the tier's stage 1
// burst of requests and then denied with the code and type the SDK reads;
// and the SDK, left to retry, waits what retry-after-ms says and is
// admitted.
func TestLLMGuideWithOpenAISDK(t *testing.T) {
	node, dir := openAISDK(t)
	for _, store := range []string{"memory", "redis", "cluster"} {
		t.Run(store, func(t *testing.T) {
			up := llmUpstream(t)
			// On a Cluster, the route's four policies are decided in one
			// script, in one slot.
			p := startYAMLGateway(t, guideConfig(t, up.URL), store)
			out := runNode(t, node, dir, "openai_guide.mjs", "QG_BASE="+p.URL(), "QG_KEY=llm-free-key")
			var stream struct {
				OK    bool           `json:"ok"`
				Usage map[string]int `json:"usage"`
			}
			var burst struct {
				OK, Denied int
				ElapsedMS  int64 `json:"elapsedMs"`
				First      *struct {
					Code, Type, Message string
					RetryAfterMS        string `json:"retryAfterMs"`
				}
				Other *struct {
					Status  int
					Message string
				}
			}
			var retried struct {
				OK        bool  `json:"ok"`
				ElapsedMS int64 `json:"elapsedMs"`
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				t.Logf("sdk %s", sc.Text())
				var step struct{ Step string }
				_ = json.Unmarshal(sc.Bytes(), &step)
				var dst any
				switch step.Step {
				case "stream":
					dst = &stream
				case "burst":
					dst = &burst
				case "retried":
					dst = &retried
				default:
					t.Fatalf("unknown step in %q", sc.Text())
				}
				if err := json.Unmarshal(sc.Bytes(), dst); err != nil {
					t.Fatalf("%q: %v", sc.Text(), err)
				}
			}
			if !stream.OK || stream.Usage["total_tokens"] != 100 {
				t.Errorf("stream: ok %v usage %v, want ok with 100 tokens in all", stream.OK, stream.Usage)
			}
			// The free tier's stage 1 holds a burst of 20 requests and
			// refills 2 a second; the stream took one.
			const burstLeft = 19
			refilled := int(burst.ElapsedMS/500) + 1
			switch {
			case burst.Other != nil:
				t.Errorf("burst: an answer other than 200 and 429: %+v", *burst.Other)
			case burst.OK < burstLeft || burst.OK > burstLeft+refilled:
				t.Errorf("burst: %d admitted of 30 in %d ms, want %d (+ at most %d refilled)", burst.OK, burst.ElapsedMS, burstLeft, refilled)
			case burst.First == nil:
				t.Errorf("burst: no 429 in 30 requests")
			case burst.First.Code != "rate_limit_exceeded" || burst.First.Type != "requests" || !strings.Contains(burst.First.Message, "Rate limit reached"):
				t.Errorf("burst: the SDK read code %q type %q message %q, want rate_limit_exceeded, requests and the gateway's message",
					burst.First.Code, burst.First.Type, burst.First.Message)
			}
			if burst.First != nil {
				if ms, err := strconv.Atoi(burst.First.RetryAfterMS); err != nil || ms < 1 || ms > 500 {
					t.Errorf("burst: retry-after-ms %q, want 1..500 (one request of a 2/s refill)", burst.First.RetryAfterMS)
				}
			}
			if !retried.OK {
				t.Errorf("retried: the SDK's retries were not admitted")
			}
		})
	}
}
