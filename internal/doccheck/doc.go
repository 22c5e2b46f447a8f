// Package doccheck holds the tests of the project's Markdown: README.md,
// CHANGELOG.md, BENCHMARKS.md and every page under docs/. They fail on a
// relative link to a file that does not exist or to an anchor its page
// does not have (anchors as GitHub makes them from headings), on a long
// page without a table of contents, on a README over 300 lines, and on a
// configuration block marked "<!-- doccheck: config -->" that does not
// validate. LLMGuideConfig gives the tests that run the LLM guide its
// configuration.
package doccheck
