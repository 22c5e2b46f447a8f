package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// noEnv is a getenv that finds no variable, so that tests do not depend on
// the environment they run in.
func noEnv(string) (string, bool) { return "", false }

// invalidCases pairs each fixture of testdata/invalid with every problem
// Load must report for it, in order.
var invalidCases = map[string][]string{
	"unknown_key.yaml": {
		`policies.tenant.limits: must set a limit for at least one tier (or "*" for every tier)`,
		`policies.tenant.limts: unknown key (did you mean "limits"?)`,
	},
	"unknown_section.yaml": {
		`logs: unknown key (did you mean "log"?)`,
	},
	"wrong_type.yaml": {
		`policies.tenant.limits.free.rate: must be a whole number, got 1.5`,
		`policies.tenant.shadow: must be true or false, got "maybe"`,
		`routes[0].cost: must be a whole number, got a list`,
		`server.heap_floor_bytes: must be a whole number, got "64MiB"`,
		`server.idle_timeout: must be a duration such as 250ms, 1s or 1m, got "soon"`,
		`server.max_header_bytes: must be a whole number, got "lots"`,
		`server.read_header_timeout: must be a duration such as 250ms, 1s or 1m, got 5 (missing unit)`,
		`server.trusted_proxies: must be a list, got "127.0.0.1"`,
	},
	"admin_token_env.yaml": {
		`server.admin_token_env: must name an environment variable, got "admin token"`,
		`server.pprof: must be true or false, got "sometimes"`,
	},
	"case_collision.yaml": {
		`tiers.free: written twice, as "Free" and "free" (keys and names are case-insensitive)`,
	},
	"nonpositive_limit.yaml": {
		`policies.tenant.limits.free.burst: must be > 0 (the most units available at once)`,
		`policies.tenant.limits.free.per: must be > 0`,
		`policies.tenant.limits.free.rate: must be > 0`,
	},
	"calendar.yaml": { // path-like zones never reach the file system
		`policies.absolute.limits.free.calendar.time_zone: unknown time zone "/etc/localtime"`,
		`policies.bucket.limits.free.calendar: applies to fixed_window only, not token_bucket; use per`,
		`policies.dotdot.limits.free.calendar.time_zone: unknown time zone "../../etc/passwd"`,
		`policies.monthly.limits.free.per: must be left out when calendar is set (the calendar sets the window)`,
		`policies.zone.limits.free.calendar.time_zone: unknown time zone "Mars/Olympus"`,
		`policies.zone.limits.free.calendar.unit: must be day, week or month, got "fortnight"`,
		`policies.zone.limits.free.per: must be > 0`,
	},
	"upstreams.yaml": { // a policy listed by two candidates is one bucket, not a duplicate
		`routes[0].policies: cannot be written beside upstreams: list the policies of each upstream under it`,
		`routes[0].upstream: cannot be written beside upstreams: the route forwards to one of its upstreams`,
		`routes[1].upstreams: lists 5 upstreams, at most 4`,
		`routes[1].upstreams[0].policies: is required but on the last upstream: without policies it admits every request, and the upstreams after it are never used`,
		`routes[1].upstreams[1].policies[1]: policy "rpm" is listed twice`,
		`routes[1].upstreams[1].policies[2]: unknown policy "nope" (known: rpm, slots)`,
		`routes[1].upstreams[1].upstream: upstream "ptu" is listed twice (routes[1].upstreams[0])`,
		`routes[1].upstreams[2].upstream: unknown upstream "elsewhere" (known: paygo, ptu)`,
		`routes[1].upstreams[3].upstream: is required`,
		`routes[2].upstreams[0].policies[0]: policy "slots" queues denied requests, which only the last upstream may: a request this upstream denies goes to the next`,
	},
	"burst_on_window.yaml": {
		`policies.windowed.limits.free.burst: does not apply to sliding_window (its capacity is rate per window); remove it`,
	},
	"buckets.yaml": {
		`policies.tenant.limits.free.buckets: applies to sliding_window only, not token_bucket; remove it`,
		`policies.windowed.limits.*.buckets: must be in [1, 100] (0 or left out means 10), got -1`,
		`policies.windowed.limits.free.buckets: must be in [1, 100] (0 or left out means 10), got 500`,
	},
	"sliding_log_rate.yaml": {
		`policies.log.limits.free.rate: must be at most 1000 for sliding_log (its state holds one entry per request); use sliding_window for larger rates`,
	},
	"exact_range.yaml": {
		`policies.daily.limits.free.burst: burst × per (200000 × 86400000000µs) must be at most 2^53; lower the burst or the period`,
		`policies.daily.limits.free.rate: rate × per (200000 × 86400000000µs) must be at most 2^53; lower the rate or the period`,
		`policies.fine.limits.free.per: must be a whole number of microseconds, got 1.5µs`,
	},
	"cost_exceeds_capacity.yaml": {
		`routes[0].cost: 10 exceeds the capacity 5 of policy "tenant" for tier "free": such a request could never be admitted`,
		`routes[0].cost: 10 exceeds the capacity 8 of policy "windowed" for "*": such a request could never be admitted`,
		`routes[1].cost: must be >= 1`,
	},
	"cost_exceeds_local_burst.yaml": {
		`routes[0].cost: 5 exceeds the stage 1 burst 3 of tier "free": its callers could never be admitted`,
	},
	"anonymous_prefix.yaml": {
		`identity.anonymous.ipv6_prefix: must be 32 to 128 (the bits of the IPv6 prefix that is one caller; 0 or left out means 64), got 16`,
	},
	"unknown_tier.yaml": {
		`identity.anonymous.tier: unknown tier "anonymous" (known: free)`,
		`identity.api_keys[0].tier: unknown tier "gold" (known: free)`,
		`identity.api_keys[1].tier: is required`,
		`policies.tenant.limits.platinum: unknown tier "platinum" (known: free); "*" means every tier`,
	},
	"upstream_resilience.yaml": {
		`upstreams.api.shedding.max_inflight: must be at least min_inflight 8, got 2`,
		`upstreams.api.shedding.target_latency: must be > 0`,
		`upstreams.app.breaker.cooldown: must be > 0`,
		`upstreams.app.breaker.failures: must be at least 1, got -1`,
		`upstreams.app.shedding.min_inflight: must be at least 1, got 0`,
		`upstreams.app.shedding.priority[2]: unknown tier "gold" (known: free, pro)`,
		`upstreams.app.shedding.priority[3]: tier "free" is listed twice`,
		`upstreams.app.shedding.target_latency: is required: the latency the upstream should keep to, such as 250ms`,
	},
	"dangling_upstream.yaml": {
		`routes[0].upstream: unknown upstream "ap" (known: app)`,
		`routes[1].upstream: is required`,
	},
	"dangling_policy.yaml": {
		`routes[0].policies[1]: unknown policy "tenants" (known: tenant)`,
		`routes[0].policies[2]: policy "tenant" is listed twice`,
		`routes[0].policies[3]: "local" is stage 1, which applies to every route through tiers; remove it`,
	},
	"bad_key_hash.yaml": {
		`identity.api_keys[0].key_sha256: must be the SHA-256 of the key as 64 hex digits (not the key itself)`,
		`identity.api_keys[1].key_sha256: must be the SHA-256 of the key as 64 hex digits (not the key itself)`,
		`identity.api_keys[3].key_sha256: duplicate of identity.api_keys[2]`,
		`identity.api_keys[4].tenant: must be 1 to 256 bytes without control characters`,
		`identity.api_keys[5].tenant: is required`,
	},
	"route_names.yaml": {
		`routes[1].name: duplicate of routes[0].name "app.get"`,
		`routes[2].name: route name must be 1 to 64 characters of a-z, 0-9, '_', '.' and '-'`,
		`routes[3].name: route name must be 1 to 64 characters of a-z, 0-9, '_', '.' and '-'`,
	},
	"client_signals.yaml": {
		`routes[0].client_signals: must be none or openai, got "OpenAI"`,
		`server.client_signals: must be none or openai, got "anthropic"`,
	},
	"bad_method.yaml": {
		`routes[0].method: must be an uppercase HTTP method such as GET or POST, got "get"`,
		`routes[1].method: must be an uppercase HTTP method such as GET or POST, got "GET /"`,
		`routes[2].method: must be an uppercase HTTP method such as GET or POST, got ""`,
	},
	"bad_path.yaml": {
		`routes[0].path: must start with "/", got "v1/items"`,
		`routes[1].path: segment "item{id}": a parameter must be a whole segment, like {id}`,
		`routes[2].path: parameter {id} appears twice`,
		`routes[3].path: segment "{rest...}": {rest...} must be the last segment`,
		`routes[4].path: segment "*": '*' is not a wildcard here; use a last segment {name...} to match the rest`,
		`routes[5].path: has an empty segment ("//") in "/v1//items"`,
		`routes[6].path: segment "{}": a parameter name must be a letter or '_' followed by up to 31 letters, digits or '_'`,
		`routes[7].path: segment ".." can never match a cleaned request path`,
		`routes[8].path: segment "a b" has a character not allowed in a URL path`,
		`routes[9].path: segment "%zz" has a character not allowed in a URL path`,
		`routes[10].path: segment "{1st}": a parameter name must be a letter or '_' followed by up to 31 letters, digits or '_'`,
		`routes[11].path: must not end in "/" (only the root "/" does), got "/v1/items/"`,
		`routes[12].path: segment "a%20b" has a character not allowed in a URL path`,
		`routes[13].path: segment "items;v=2": ';' starts a path parameter, which requests are matched without`,
		`routes[14].path: segment "items.": must not end in '.' (requests are matched without trailing dots)`,
	},
	"shadowed_route.yaml": {
		`routes[1].path: matches the same requests as routes[0], which comes first: this route can never match`,
		`routes[3].path: matches the same requests as routes[0], which comes first: this route can never match`,
	},
	"trusted_proxies.yaml": {
		`server.trusted_proxies[2]: must be an IP address or a CIDR such as 10.0.0.0/8, got "10.0.0.300"`,
		`server.trusted_proxies[3]: must be an IP address or a CIDR such as 10.0.0.0/8, got "proxy.local"`,
		`server.trusted_proxies[4]: must be an IP address or a CIDR such as 10.0.0.0/8, got "10.0.0.0/33"`,
		`server.trusted_proxies[5]: must be an IP address or a CIDR such as 10.0.0.0/8, got "fe80::1%eth0"`,
	},
	"policy_names.yaml": {
		`policies.local: the policy name "local" is reserved for stage 1 (tiers.*.local)`,
		`policies["bad name"]: policy name must be 1 to 64 characters of a-z, 0-9, '_', '.' and '-'`,
	},
	"unknown_values.yaml": {
		`log.level: must be debug, info, warn or error, got "verbose"`,
		`policies.tenant.algorithm: must be token_bucket, fixed_window, sliding_window, sliding_log or concurrency, got "leaky_bucket"`,
		`policies.tenant.on_store_error: must be open, closed or local, got "retry"`,
		`policies.tenant.scope: must be tenant, tenant_route, route or global, got "user"`,
		`store.kind: must be memory or redis, got "etcd"`,
	},
	"redis_settings.yaml": {
		`store.fleet.ttl: must be >= 300ms (a heartbeat every ttl/3), got 100ms`,
		`store.fleet_size: must be >= 1`,
		`store.redis.addrs: must list at least one host:port when store.kind is "redis"`,
		`store.redis.breaker_cooldown: must be > 0`,
		`store.redis.breaker_failures: must be > 0`,
		`store.redis.key_prefix: must be 1 to 32 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-', got "{qg}"`,
		`store.redis.password_env: must name an environment variable, got "redis password"`,
		`store.redis.pool_size: must be > 0`,
		`store.redis.timeout: must be at most 1s (it is added to a request's latency), got 2s`,
	},
	"redis_addrs.yaml": {
		`store.redis.addrs[0]: must be host:port, such as 127.0.0.1:6379, got "localhost"`,
		`store.redis.addrs[2]: duplicate of store.redis.addrs[1]`,
		`store.redis.addrs[3]: must be host:port, such as 127.0.0.1:6379, got "127.0.0.1:0" (port must be a number from 1 to 65535)`,
		`store.redis.addrs[4]: must be host:port, such as 127.0.0.1:6379, got ":6379" (missing host)`,
		`store.redis.addrs[5]: must be host:port, such as 127.0.0.1:6379, got "127.0.0.1:http" (port must be a number from 1 to 65535)`,
	},
	"redis_tls.yaml": {
		`store.redis.tls.ca_file: cannot be read: open testdata/no-such-ca.pem: no such file or directory`,
		`store.redis.tls.cert_file: cannot be read: it is a directory`,
		`store.redis.tls.key_file: is required with cert_file: a client certificate and its key come together`,
	},
	"redis_tls_off.yaml": {
		`store.redis.tls.ca_file: is set but store.redis.tls.enabled is false (set enabled: true, or remove it)`,
		`store.redis.tls.server_name: is set but store.redis.tls.enabled is false (set enabled: true, or remove it)`,
	},
	"redis_tls_content.yaml": {
		`store.redis.tls.ca_file: testdata/minimal.yaml holds no PEM certificate`,
	},
	"bad_upstream_url.yaml": {
		`upstreams.creds.url: must not carry credentials (user:password@), got "https://svc:xxxxx@api.example.com/base"`,
		`upstreams.echo.timeout: must be > 0`,
		`upstreams.echo.url: must be an absolute http or https URL such as http://127.0.0.1:9001, or "echo:", got "echo:x"`,
		`upstreams.fragment.url: must not have a #fragment, got "http://example.com/#top"`,
		`upstreams.ftp.url: must be an absolute http or https URL such as http://127.0.0.1:9001, or "echo:", got "ftp://files.example.com"`,
		`upstreams.missing.url: is required: an absolute http or https URL such as http://127.0.0.1:9001, or "echo:"`,
		`upstreams.nohost.url: must be an absolute http or https URL such as http://127.0.0.1:9001, or "echo:", got "http://"`,
		`upstreams.relative.url: must be an absolute http or https URL such as http://127.0.0.1:9001, or "echo:", got "/api"`,
		`upstreams.secret.url: has a bad port, got "http://user:xxxxx@:99999"`,
	},
	"jwt_without_secret.yaml": {
		`identity.jwt.secret_env: is required: the name of the environment variable holding the HS256 secret`,
		`identity.jwt.tenant_claim: must not be empty`,
	},
	"jwt_claims.yaml": {
		`identity.jwt.audiences[1]: duplicate of identity.jwt.audiences[0]`,
		`identity.jwt.clock_skew: must be 0s (no leeway) to 5m0s (the leeway on exp, nbf and iat; left out means 5s), got 1h0m0s`,
		`identity.jwt.issuers[1]: must not be empty`,
		`identity.jwt.issuers[2]: duplicate of identity.jwt.issuers[0]`,
		`identity.jwt.issuers[3]: must be 1 to 1024 bytes without control characters`,
	},
	"no_identity.yaml": {
		`identity: must configure api_keys, jwt or anonymous (without any, every request is answered 401)`,
		`routes: must list at least one route (without any, every request is answered 404)`,
	},
	"server_settings.yaml": {
		`server.admin_listen: must differ from server.listen`,
		`server.heap_floor_bytes: must be between 0 (no floor) and 68719476736 bytes (64 GiB), got -1`,
		`server.max_body_bytes: must be > 0`,
		`server.max_local_callers: must be > 0`,
		`server.read_header_timeout: must be > 0`,
		`server.shutdown_timeout: must be > 0`,
		`server.upstream_exchanges: must be direct or standard, got "fast"`,
	},
	"rls_settings.yaml": {
		`rls.config_files: must name at least one descriptor file when rls.listen or rls.http_listen is set`,
		`rls.http_listen: must be host:port, such as 127.0.0.1:6379, got "localhost"`,
		`rls.limit_overrides: must be allow or ignore, got "raise"`,
		`rls.listen: must differ from server.listen and server.admin_listen`,
		`rls.on_store_error: must be unavailable, open, closed or local, got "maybe"`,
		`rls.shutdown_delay: must be 0s (no delay) to 1m0s (how long NOT_SERVING is answered before the graceful stop; left out means 5s), got 2m0s`,
		`rls.tls.key_file: is required when rls.tls is set`,
	},
	"lease_settings.yaml": {
		`policies.tenant.lease.instances: must be >= 1 (leave it out for store.fleet_size)`,
		`policies.tenant.lease.max_block: must be >= 1`,
		`policies.tenant.lease.ttl: must be > 0`,
	},
	"lease_algorithm.yaml": {
		`policies.autowindow.lease: applies to token_bucket policies only, not sliding_window; remove it`,
		`policies.negative.lease.max_block: must be >= 0 (0 or absent: no bound but burst/(2 × instances))`,
		`policies.sometimes.lease: must be "auto" or a mapping (auto, max_block, ttl, instances), got "sometimes"`,
		`policies.watched.lease: a shadow policy is never leased; remove it`,
		`policies.windowed.lease: applies to token_bucket policies only, not fixed_window; remove it`,
	},
	"concurrency.yaml": {
		`policies.inflight.limits.free.max: must be in [1, 1048576], got 0`,
		`policies.inflight.limits.pro.per: does not apply to concurrency (slot_ttl is how long a slot lives); remove it`,
		`policies.inflight.limits.pro.rate: does not apply to concurrency (its capacity is max); remove it`,
		`policies.inflight.queue.max: must be >= 1 (leave queue out for no queue)`,
		`policies.inflight.queue.timeout: must be > 0`,
		`policies.inflight.slot_ttl: must be at least 1s, got 500ms`,
		`policies.rated.limits.free.max: applies to concurrency only, not token_bucket; remove it`,
		`policies.rated.queue: applies to concurrency policies only, not token_bucket; remove it`,
		`policies.rated.slot_ttl: applies to concurrency policies only, not token_bucket; remove it`,
	},
	"dimensions.yaml": {
		`dimensions.bad-name: a dimension's name must be 1 to 32 of [a-z0-9_]`,
		`dimensions.bad-name.header: "X Bad" is not a valid header name`,
		`dimensions.empty.values: must list 1 to 64 values, got 0`,
		`dimensions.model.values[1]: "gpt-4o" is listed twice (values are compared case-insensitively)`,
		`dimensions.model.values[2]: "bad value": a value is 1 to 64 of [A-Za-z0-9._/@+-]`,
		`dimensions.region: must name exactly one of json and header`,
		`policies.flat.by[0]: unknown dimension "nowhere" (known: bad-name, empty, model, region)`,
		`policies.plain.values: needs by: values are limits of single values of the dimension the policy is keyed by`,
		`policies.rpm.by: names 2 dimensions; a policy is keyed by at most one`,
		`policies.tpm.values.gpt-4o.free.rate: must be > 0`,
		`policies.tpm.values.gpt-5: is not a value of dimension model (gpt-4o, gpt-4o, bad value)`,
		`routes[0].policies: policy tpm is by dimension model, policy regional by region: the policies of a route are keyed by at most one dimension`,
		`routes[0].policies[0].cost: 20 exceeds the capacity 10 of policy "tpm" for value gpt-4o of tier "free": such a request could never be admitted`,
		`routes[0].policies[0].cost: 20 exceeds the capacity 10 of policy "tpm" for value gpt-5 of tier "free": such a request could never be admitted`,
	},
	"prices.yaml": {
		`prices.cheap.cached: "2000000" is above 1000000 USD per million tokens`,
		`prices.cheap.input: must be a decimal number of USD per million tokens, such as "2.50", got "-1"`,
		`prices.cheap.output: must be a decimal number of USD per million tokens, such as "2.50", got "0."`,
		`prices.gpt-4o.input: "2.5000" has more than 3 decimals: prices are held in nano-USD per token (0.001 USD per million tokens)`,
		`prices.gpt-4o.output: must be a decimal number of USD per million tokens, such as "2.50", got "1e3"`,
		`routes[0].measures: policy tpm is by dimension region, price(model) by model: a route reads at most one dimension`,
		`routes[0].measures: policy tpm is by dimension region, price(size) by size: a route reads at most one dimension`,
		`routes[0].measures.tokens.reserve_from.prompt_bytes_per_token: needs json: it bounds the prompt of a body that states its completion`,
		`routes[0].measures.tokens.settle: price(model).bulk: a price is input, output or cached`,
		`routes[0].measures.tokens.settle: price(model): prices needs an entry "*": it prices the values that are none of dimension model's, and those without their own`,
		`routes[0].measures.tokens.settle: price(size): unknown dimension "size" (known: model, region)`,
		`routes[0].measures.tokens.settle: settle and settle_from are two ways to say what the response used: write one`,
		`routes[1].measures.tokens.settle: at 22: no unary minus: "-" subtracts a term from the one before it, and a value is never negative`,
	},
	"reserve_bound.yaml": {
		`routes[0].measures.usd.max: is required with reserve_from.measure: it caps the reservation, and is reserved when the body states no bound readably`,
		`routes[0].measures.usd.reserve_from.completion: is the prompt's field too (usage.prompt_tokens): the two bounds stand for two fields`,
		`routes[0].measures.usd.reserve_from.measure: settle subtracts (at 21), so its value on the bounds is no upper bound: write a fixed reserve instead, or a settle without "-"`,
		`routes[1].measures.eur.reserve_from.measure: names this measure itself: name the measure whose reserve_from reads the token bounds`,
		`routes[1].measures.eur.reserve_from.measure: needs settle: the reservation is settle's value on the bounds`,
		`routes[1].measures.gbp.reserve_from: prompt and completion need measure: they name the fields its bounds stand for`,
		`routes[1].measures.tokens.reserve_from.measure: cannot be written beside json or header: the reservation is settle's value on that measure's bounds`,
		`routes[1].measures.usd.reserve_from.measure: "tokns" is not a measure of this route (known: eur, gbp, tokens, usd)`,
		`routes[2].measures.eur.reserve_from.measure: measure gbp does not read the request body (reserve_from.json): it has no bound of the completion`,
		`routes[2].measures.gbp.reserve_from.measure: measure tokens has no reserve_from.prompt_bytes_per_token: the prompt has no bound`,
		`routes[2].measures.gbp.reserve_from.measure: settle reads neither usage.p nor usage.c: its value would not grow with the request's bounds`,
		`routes[2].measures.usd.reserve_from.measure: measure tokens has no reserve_from.prompt_bytes_per_token: the prompt has no bound`,
	},
	"measures.yaml": {
		`routes[0].measures.bad-name: a measure's name must be 1 to 32 of [a-z0-9_]`,
		`routes[0].measures.bad-name: is the cost of no policy of the route: bind one with {name: P, cost: bad-name}, or remove it`,
		`routes[0].measures.tokens.max: 5000 exceeds the capacity 1000 of policy "tpm" for tier "free": such a request could never be admitted`,
		`routes[0].measures.tokens.reserve_from.json: only one measure of a route reads the request body, and measure bad-name does`,
		`routes[0].measures.unused: is the cost of no policy of the route: bind one with {name: P, cost: unused}, or remove it`,
		`routes[0].policies[1].cost: "tokns" is neither a whole number of units nor a measure of this route (known: bad-name, tokens, unused)`,
		`routes[0].policies[2]: unknown policy "rpm2" (known: rpm, slots, tpm)`,
		`routes[0].policies[2].cost: must be >= 1, got 0`,
		`routes[0].policies[3].cost: policy "slots" limits concurrency: a request holds one slot, whatever its cost; list it by its name`,
		`routes[0].policies[4].name: is required`,
		`routes[1].cost: a cost block cannot be written beside measures: write it as measures.cost and bind each policy to it with {name: P, cost: cost}`,
		`routes[1].policies[0].cost: 2000 exceeds the capacity 1000 of policy "tpm" for tier "free": such a request could never be admitted`,
		`routes[2].measures.tokens.reserve: is required, >= 1 (the units taken when the request does not say)`,
	},
	"cost_block.yaml": {
		`routes[0].cost.max: must be >= reserve (1000), got 500`,
		`routes[0].cost.max_body: must be in [1, 67108864] bytes, got 0`,
		`routes[0].cost.on_missing_usage: must be keep or max, got "all"`,
		`routes[0].cost.reserve_from.header: "X Max" is not a valid header name`,
		`routes[0].cost.reserve_from.json: path "max..tokens" has an empty key`,
		`routes[0].cost.reserve_from.json_aliases[0]: must not be empty`,
		`routes[0].cost.reserve_from.json_aliases[1]: path "a..b" has an empty key`,
		`routes[0].cost.reserve_from.json_count: path "n." has an empty key`,
		`routes[0].cost.settle_from.sse: path ".x" has an empty key`,
		`routes[0].cost.settle_policies[1]: policy "tokens" is listed twice`,
		`routes[0].cost.settle_policies[2]: policy "slots" limits concurrency: a slot is released, not settled`,
		`routes[0].cost.settle_policies[3]: "other" is not a policy of this route (tokens, slots)`,
		`routes[1].cost.max: 6000 exceeds the capacity 4000 of policy "tokens" for tier "free": such a request could never be admitted`,
		`routes[1].cost.max: 6000 exceeds the stage 1 burst 5000 of tier "free": its callers could never be admitted`,
		`routes[1].cost.reserv: unknown key (did you mean "reserve"?)`,
		`routes[1].cost.reserve: is required, >= 1 (the units taken when the request does not say)`,
		`routes[1].cost.reserve_from.json_aliases: needs json: they are more names of the field json names`,
		`routes[1].cost.reserve_from.json_count: needs json: it multiplies the reservation json states`,
		`routes[1].cost.settle_from: must name header, json or sse (or be left out)`,
		`routes[2].cost.max: is above reserve but no reserve_from says where a request asks for more; remove it or add reserve_from`,
		`routes[2].cost.on_missing_usage: needs settle_from: without it nothing is settled and the reservation always stands`,
		`routes[2].cost.settle_policies: needs settle_from: nothing says what to settle`,
		`routes[3].cost.max: is required with reserve_from.json: a request whose body does not state max_tokens readably (compressed, without it, longer than max_body) reserves max`,
	},
	"lease_cost.yaml": {
		`routes[0].cost: 20 exceeds lease.max_block 10 of policy "tenant": a block could never hold such a request`,
	},
	// One mistake of each common kind, all reported at once.
	"many_mistakes.yaml": {
		`identity.api_keys[0].key_sha256: must be the SHA-256 of the key as 64 hex digits (not the key itself)`,
		`identity.api_keys[1].tier: unknown tier "gold" (known: free)`,
		`policies.transfers.limits.free.rate: must be > 0`,
		`routes[0].policies[1]: unknown policy "tenant" (known: transfers)`,
		`routes[0].upstream: unknown upstream "paymnts" (known: payments)`,
		`server.admin_listn: unknown key (did you mean "admin_listen"?)`,
	},
}

func TestLoadInvalid(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := invalidCases[filepath.Base(f)]; !ok {
			t.Errorf("%s has no expected problems in invalidCases", f)
		}
	}
	for name, want := range invalidCases {
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			c, err := Load(filepath.Join("testdata", "invalid", name), noEnv)
			if c != nil {
				t.Errorf("Load returned a config with error %v", err)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Load error = %v (%T), want Errors", err, err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if err.Error() != strings.Join(want, "\n") {
				t.Errorf("Error() = %q", err.Error())
			}
		})
	}
}

// The fixture's problems are also found by errors.As on a single
// FieldError, with Path and Problem apart.
func TestErrorsAs(t *testing.T) {
	_, err := Load("testdata/invalid/unknown_section.yaml", noEnv)
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("errors.As(%v, *FieldError) = false", err)
	}
	if fe.Path != "logs" || fe.Problem != `unknown key (did you mean "log"?)` {
		t.Errorf("FieldError = %+v", fe)
	}
}

func TestLoadUnreadable(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent.yaml")
	_, err := Load(missing, noEnv)
	var es Errors
	if err == nil || errors.As(err, &es) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v, want a plain error naming the file", err)
	}
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want it to wrap os.ErrNotExist", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  listen: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad, noEnv)
	if err == nil || errors.As(err, &es) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line") {
		t.Errorf("Load(malformed) = %v, want a YAML error naming file and line", err)
	}

	// A key written twice with the same spelling is a YAML error.
	_, err = Parse([]byte("tiers: {a: {}}\ntiers: {b: {}}\n"), noEnv)
	if err == nil || errors.As(err, &es) || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("Parse(duplicate key) = %v, want a YAML error", err)
	}
}
