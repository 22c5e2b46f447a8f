package config

// The configuration reference is generated from the doc comments of the
// types of this package; TestReferenceUpToDate (internal/docgen) fails
// when it is out of date.
//go:generate go run ../internal/docgen -out ../docs/reference/configuration.md
