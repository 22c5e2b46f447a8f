// Package hotkeys estimates which keys take the most decisions, in bounded
// memory and at a small, lock-free cost per decision (see Tracker), so an
// operator can see which tenant would gain from a lease. It knows keys and
// time only.
package hotkeys
