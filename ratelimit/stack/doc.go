// Package stack assembles a complete decision store from a backend: a
// Breaker (open while the backend fails), a DenialCache (denials repeated
// locally until they run out), a Fallback (each item's OnError when the
// backend cannot decide, on local shares sized by the Fleet), and Stack,
// the whole, which the gateway and the decision service both call.
//
// The layers share one package because they are built to be assembled:
// Stack reads the Breaker's cooldown and state and the Fallback's local
// slots, and the Fleet sizes the Fallback's shares; apart, none of them is
// used. Each keeps its own file.
package stack
