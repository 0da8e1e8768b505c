// Package adminjson writes the JSON answers of fakecloud's fault admin endpoints, one shape for all of them.
package adminjson

import (
	"encoding/json"
	"net/http"
)

// Write answers v as indented JSON with status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Error answers {"error": msg} with status.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, struct {
		Error string `json:"error"`
	}{msg})
}
