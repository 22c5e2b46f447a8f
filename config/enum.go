package config

import (
	"fmt"
	"slices"
	"strings"
)

// The settings that take one of a few names are typed: each type's
// UnmarshalText refuses any other name, so the decoder reports it at its
// field path ("did you mean" when a name is near), and Validate checks the
// same list for a configuration built in code. The zero value ("") is what
// a key left out decodes to before defaults; after them it never is.

// StoreKind is store.kind: StoreMemory or StoreRedis.
type StoreKind string

// The kinds of store.
const (
	StoreMemory StoreKind = "memory" // embedded, this instance only
	StoreRedis  StoreKind = "redis"  // shared by the fleet
)

// UnmarshalText sets k from "memory" or "redis".
func (k *StoreKind) UnmarshalText(b []byte) error { return setEnum(k, b, StoreMemory, StoreRedis) }

// Exchanges is server.upstream_exchanges: ExchangesDirect or
// ExchangesStandard.
type Exchanges string

// The ways requests without a body reach http upstreams.
const (
	ExchangesDirect   Exchanges = "direct"   // written and read on the request's own goroutine
	ExchangesStandard Exchanges = "standard" // through net/http's Transport
)

// UnmarshalText sets e from "direct" or "standard".
func (e *Exchanges) UnmarshalText(b []byte) error {
	return setEnum(e, b, ExchangesDirect, ExchangesStandard)
}

// MissingUsage is routes[].cost.on_missing_usage: MissingUsageKeep or
// MissingUsageMax.
type MissingUsage string

// The modes of on_missing_usage.
const (
	MissingUsageKeep MissingUsage = "keep" // the reservation stands
	MissingUsageMax  MissingUsage = "max"  // the request takes max (or the usage read, when more)
)

// UnmarshalText sets m from "keep" or "max".
func (m *MissingUsage) UnmarshalText(b []byte) error {
	return setEnum(m, b, MissingUsageKeep, MissingUsageMax)
}

// RLSErrorMode is rls.on_store_error (and a descriptor's): what a decision
// does when the store cannot decide.
type RLSErrorMode string

// The modes of rls.on_store_error.
const (
	RLSUnavailable RLSErrorMode = "unavailable" // UNAVAILABLE / 503, for Envoy's failure_mode_deny
	RLSOpen        RLSErrorMode = "open"        // OK
	RLSClosed      RLSErrorMode = "closed"      // OVER_LIMIT
	RLSLocal       RLSErrorMode = "local"       // this instance's share of the limit
)

// UnmarshalText sets m from one of RLSOnStoreError.
func (m *RLSErrorMode) UnmarshalText(b []byte) error {
	return setEnum(m, b, RLSUnavailable, RLSOpen, RLSClosed, RLSLocal)
}

// Overrides is rls.limit_overrides: OverridesAllow or OverridesIgnore.
type Overrides string

// The modes of rls.limit_overrides.
const (
	OverridesAllow  Overrides = "allow"  // a descriptor's limit override replaces the configured limit
	OverridesIgnore Overrides = "ignore" // overrides are ignored
)

// UnmarshalText sets o from "allow" or "ignore".
func (o *Overrides) UnmarshalText(b []byte) error {
	return setEnum(o, b, OverridesAllow, OverridesIgnore)
}

// ClientSignals is server.client_signals and routes[].client_signals:
// which rate-limit signals a route's responses carry for its clients,
// beside the gateway's own (RateLimit, Retry-After, problem+json).
type ClientSignals string

// The sets of client signals.
const (
	// ClientSignalsNone sends the gateway's own signals only.
	ClientSignalsNone ClientSignals = "none"
	// ClientSignalsOpenAI adds what OpenAI's SDKs read: retry-after-ms,
	// x-ratelimit-{limit,remaining,reset}-{requests,tokens} and
	// x-should-retry, and answers 429 and 400 in OpenAI's error envelope.
	ClientSignalsOpenAI ClientSignals = "openai"
)

// UnmarshalText sets s from "none" or "openai".
func (s *ClientSignals) UnmarshalText(b []byte) error {
	return setEnum(s, b, ClientSignalsNone, ClientSignalsOpenAI)
}

// LogLevel is log.level: debug, info, warn or error.
type LogLevel string

// The log levels.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// UnmarshalText sets l from debug, info, warn or error (any case).
func (l *LogLevel) UnmarshalText(b []byte) error {
	return setEnum(l, []byte(strings.ToLower(string(b))), LogDebug, LogInfo, LogWarn, LogError)
}

// setEnum sets *p to the value of names that b spells, or reports the
// names it may be.
func setEnum[T ~string](p *T, b []byte, names ...T) error {
	if err := checkEnum(T(b), names...); err != nil {
		return err
	}
	*p = T(b)
	return nil
}

// checkEnum returns nil when v is one of names, else the problem: the names
// it may be and, when one is near, which was probably meant.
func checkEnum[T ~string](v T, names ...T) error {
	if slices.Contains(names, v) {
		return nil
	}
	list := make([]string, len(names))
	best, bestDist := "", 3
	for i, n := range names {
		list[i] = string(n)
		if d := editDistance(string(v), string(n)); d < bestDist {
			best, bestDist = string(n), d
		}
	}
	msg := fmt.Sprintf("must be %s, got %q", orList(list), string(v))
	if best != "" && v != "" && bestDist <= len(v)/2 {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Errorf("%s", msg)
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// valid reports v's problem against names, for Validate.
func (k StoreKind) check() error    { return checkEnum(k, StoreMemory, StoreRedis) }
func (e Exchanges) check() error    { return checkEnum(e, ExchangesDirect, ExchangesStandard) }
func (m MissingUsage) check() error { return checkEnum(m, MissingUsageKeep, MissingUsageMax) }
func (m RLSErrorMode) check() error {
	return checkEnum(m, RLSUnavailable, RLSOpen, RLSClosed, RLSLocal)
}
func (o Overrides) check() error { return checkEnum(o, OverridesAllow, OverridesIgnore) }
func (l LogLevel) check() error  { return checkEnum(l, LogDebug, LogInfo, LogWarn, LogError) }
func (s ClientSignals) check() error {
	return checkEnum(s, ClientSignalsNone, ClientSignalsOpenAI)
}
