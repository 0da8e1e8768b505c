package faults

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/diskforge/diskforge/pkg/fakecloud/adminjson"
)

// maxAdminBody bounds a PUT body; a fault config is a few hundred bytes.
const maxAdminBody = 1 << 20

// AdminHandler serves inj's config: GET answers it as JSON, PUT replaces it with the JSON body (unknown fields
// and invalid configs get 400) and answers the new config.
func AdminHandler(inj *Injector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			adminjson.Write(w, http.StatusOK, inj.Config())
		case http.MethodPut:
			var cfg Config
			dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
			// Refusing unknown fields turns a misspelt fault into a 400 instead of a silently ignored one.
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				adminjson.Error(w, http.StatusBadRequest, fmt.Sprintf("decode fault config: %v", err))
				return
			}
			if err := inj.SetConfig(cfg); err != nil {
				adminjson.Error(w, http.StatusBadRequest, err.Error())
				return
			}
			adminjson.Write(w, http.StatusOK, inj.Config())
		default:
			w.Header().Set("Allow", "GET, PUT")
			adminjson.Error(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
		}
	})
}
