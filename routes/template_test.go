package routes

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTemplate(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxPathLength)
	many := strings.Repeat("/a", MaxSegments+1)
	tests := []struct {
		path    string
		wantErr string // substring; "" = valid
	}{
		{"/", ""},
		{"/v1/transfers/{id}", ""},
		{"/v1/files/{path...}", ""},
		{"/{rest...}", ""},
		{"/a:b/@c/x-y_z.~/!$&'()*+,=", ""},
		{"/V1/Transfers/{id}", ""},
		{"/v1/a;b", `";" starts a path parameter`},
		{"/v1/;", `";" starts a path parameter`},
		{"/v1/a./b", `must not end in "."`},
		{"/v1/...", `must not end in "."`},
		{"/{_a1}/{B}", ""},
		{strings.Repeat("/a", MaxSegments), ""},
		{"", "empty template"},
		{"v1/x", "must start with"},
		{"*", "must start with"},
		{long, "longer than"},
		{many, "more than 32 segments"},
		{"/v1/", "trailing slash"},
		{"//", "empty segment"},
		{"/a//b", "empty segment"},
		{"/a/./b", "dot segments"},
		{"/a/..", "dot segments"},
		{"/a%2Fb", "character '%'"},
		{"/a b", "character ' '"},
		{"/a\\b", "character '\\\\'"},
		{"/a?b", "character '?'"},
		{"/a}", "character '}'"},
		{"/x{id}", "character '{'"},
		{"/{id", "whole segment"},
		{"/{id}x", "whole segment"},
		{"/{}", "parameter name"},
		{"/{...}", "parameter name"},
		{"/{1a}", "parameter name"},
		{"/{a-b}", "parameter name"},
		{"/{a...}/b", "only be the final"},
		{"/{id}/{id}", "duplicate parameter name \"id\""},
		{"/{id}/{id...}", "duplicate parameter name \"id\""},
	}
	for _, tt := range tests {
		err := ValidateTemplate(tt.path)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ValidateTemplate(%.40q) = %v, want nil", tt.path, err)
		case tt.wantErr != "" && err == nil:
			t.Errorf("ValidateTemplate(%.40q) = nil, want error containing %q", tt.path, tt.wantErr)
		case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
			t.Errorf("ValidateTemplate(%.40q) = %v, want error containing %q", tt.path, err, tt.wantErr)
		}
	}
}

func TestNewTableErrors(t *testing.T) {
	ok := Spec{Name: "ok", Method: "GET", Path: "/ok"}
	tests := []struct {
		name      string
		specs     []Spec
		wantIndex int
		wantField string
		wantErr   string
	}{
		{"bad template", []Spec{ok, {Name: "b", Method: "GET", Path: "/a/"}}, 1, "path", "trailing slash"},
		{"duplicate param", []Spec{{Name: "b", Method: "GET", Path: "/{a}/{a}"}}, 0, "path", "duplicate parameter name"},
		{"empty name", []Spec{ok, {Name: "p", Method: "POST", Path: "/ok"}, {Method: "GET", Path: "/x"}}, 2, "name", "empty name"},
		{"name with colon", []Spec{{Name: "a:b", Method: "GET", Path: "/x"}}, 0, "name", "character ':'"},
		{"name with brace", []Spec{{Name: "a{b}", Method: "GET", Path: "/x"}}, 0, "name", "character '{'"},
		{"long name", []Spec{{Name: strings.Repeat("n", 65), Method: "GET", Path: "/x"}}, 0, "name", "longer than 64"},
		{"empty method", []Spec{{Name: "a", Path: "/x"}}, 0, "method", "not an HTTP method"},
		{"method with space", []Spec{{Name: "a", Method: "G T", Path: "/x"}}, 0, "method", "not an HTTP method"},
		{"same shape", []Spec{
			{Name: "a", Method: "GET", Path: "/t/{id}"},
			{Name: "b", Method: "GET", Path: "/t/{other}"},
		}, 1, "path", "same method and template shape as spec 0"},
		{"same shape but for case", []Spec{
			{Name: "a", Method: "GET", Path: "/v1/Transfers"},
			{Name: "b", Method: "GET", Path: "/v1/transfers"},
		}, 1, "path", "same method and template shape as spec 0"},
		{"same catch-all", []Spec{
			{Name: "a", Method: "GET", Path: "/t/{p...}"},
			{Name: "b", Method: "GET", Path: "/t/{q...}"},
		}, 1, "path", "same method and template shape as spec 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewTable(tt.specs)
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("NewTable error = %v, want *SpecError", err)
			}
			if se.Index != tt.wantIndex || se.Field != tt.wantField || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewTable error = %v (index %d, field %q), want index %d, field %q, containing %q",
					err, se.Index, se.Field, tt.wantIndex, tt.wantField, tt.wantErr)
			}
		})
	}
}

func TestNewTableAcceptsSameShapeOtherMethod(t *testing.T) {
	_, err := NewTable([]Spec{
		{Name: "a", Method: "GET", Path: "/t/{id}"},
		{Name: "b", Method: "POST", Path: "/t/{id}"},
		{Name: "c", Method: "GET", Path: "/t/{id...}"},
		{Name: "d", Method: "GET", Path: "/t/lit"},
	})
	if err != nil {
		t.Fatal(err)
	}
}
