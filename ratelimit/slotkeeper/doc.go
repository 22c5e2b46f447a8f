// Package slotkeeper holds the concurrency slots of this instance's
// requests in flight (see ratelimit.Concurrency): a Keeper renews all of
// them together, one call per store, and releases each when its request
// ends, so that a dead instance's slots free themselves after Limit.Per.
// It works on any ratelimit.Slots: a SlotStore or a stack.Stack.
package slotkeeper
