package iofaults

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/diskforge/diskforge/pkg/fakecloud/adminjson"
)

// maxAdminBody bounds a PUT body: MaxRules rules are a few KiB.
const maxAdminBody = 64 << 10

// Document is the admin endpoint's JSON: {"rules":[…]}.
type Document struct {
	Rules []Rule `json:"rules"`
}

// StatusDocument is what GET answers: the rules with their counters.
type StatusDocument struct {
	Rules []RuleStatus `json:"rules"`
}

// AdminHandler serves inj's rules: GET answers them with their counters, PUT replaces them with the body's
// (a Document; unknown fields and invalid rules get 400 with the reason) and DELETE removes them. Replacing or
// removing the rules releases the I/Os they hold.
func AdminHandler(inj *Injector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPut:
			var doc Document
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&doc); err != nil {
				adminjson.Error(w, http.StatusBadRequest, fmt.Sprintf("decode I/O fault rules: %v", err))
				return
			}
			if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
				adminjson.Error(w, http.StatusBadRequest, "decode I/O fault rules: trailing data after the document")
				return
			}
			if err := inj.Set(doc.Rules); err != nil {
				adminjson.Error(w, http.StatusBadRequest, err.Error())
				return
			}
		case http.MethodDelete:
			inj.Clear()
		default:
			w.Header().Set("Allow", "GET, PUT, DELETE")
			adminjson.Error(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
			return
		}
		adminjson.Write(w, http.StatusOK, StatusDocument{Rules: inj.Rules()})
	})
}
