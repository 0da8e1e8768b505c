package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// maxAdminBody bounds a PUT body; a fault config is a few hundred bytes.
const maxAdminBody = 1 << 20

// AdminHandler serves inj's config: GET answers it as JSON, PUT replaces it with the JSON body (unknown fields
// and invalid configs get 400) and answers the new config.
func AdminHandler(inj *Injector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, inj.Config())
		case http.MethodPut:
			var cfg Config
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
			// Refusing unknown fields turns a misspelt fault into a 400 instead of a silently ignored one.
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				writeJSON(w, http.StatusBadRequest, adminError{fmt.Sprintf("decode fault config: %v", err)})
				return
			}
			if err := inj.SetConfig(cfg); err != nil {
				writeJSON(w, http.StatusBadRequest, adminError{err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, inj.Config())
		default:
			w.Header().Set("Allow", "GET, PUT")
			writeJSON(w, http.StatusMethodNotAllowed, adminError{"method " + r.Method + " not allowed"})
		}
	})
}

type adminError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
