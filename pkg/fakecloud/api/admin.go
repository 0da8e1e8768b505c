package api

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// AdminRouter serves the run-time admin endpoints:
//
//	GET    /instances        instances and their attachments (JSON)
//	PUT    /instances/{id}   register or update an instance: {"zone":"…","instanceType":"…","attachmentLimit":N}
//	DELETE /instances/{id}   terminate an instance (its attachments end as TerminateInstances ends them) and forget
//	                         it at once
//	GET    /volumes          volumes with the host block device of each attachment
//	*      /faults           the fault injector's configuration (when faults is not nil)
//
// and each extra endpoint (the I/O fault rules at /io-faults, say), so that api needs no package of the block
// layer.
func AdminRouter(st *state.State, faults http.Handler, extra ...AdminEndpoint) http.Handler {
	r := chi.NewRouter()
	r.Get("/instances", func(w http.ResponseWriter, _ *http.Request) {
		insts, _, err := st.DescribeInstances(state.DescribeInput{})
		writeAdmin(w, insts, err)
	})
	r.Put("/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		var spec state.InstanceSpec
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&spec); err != nil {
			writeAdmin(w, nil, ec2err.New(ec2err.CodeInvalidParameterValue, "invalid instance JSON: %v", err))
			return
		}
		spec.ID = chi.URLParam(r, "id")
		inst, err := st.RegisterInstance(spec)
		writeAdmin(w, inst, err)
	})
	r.Delete("/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeAdmin(w, map[string]string{"removed": chi.URLParam(r, "id")}, st.RemoveInstance(chi.URLParam(r, "id")))
	})
	r.Get("/volumes", func(w http.ResponseWriter, _ *http.Request) {
		vols, _, err := st.DescribeVolumes(state.DescribeInput{})
		writeAdmin(w, vols, err)
	})
	if faults != nil {
		r.Handle("/faults", faults)
	}
	for _, e := range extra {
		r.Handle(e.Path, e.Handler)
	}
	return r
}

// AdminEndpoint is one more admin endpoint: Handler serves every method at Path.
type AdminEndpoint struct {
	Path    string
	Handler http.Handler
}

// AdminGuard lets an admin request through only when it is signed with SigV4 by one of the configured keys
// (auth, when not nil) or carries "Authorization: Bearer <token>" (token, when not empty). With neither
// configured the admin endpoints are open, as the EC2 API is.
func AdminGuard(auth Authenticator, token string, next http.Handler) http.Handler {
	if auth == nil && token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := r.Header.Get("Authorization")
		if bearer, ok := strings.CutPrefix(header, "Bearer "); ok && token != "" {
			if subtle.ConstantTimeCompare([]byte(bearer), []byte(token)) == 1 {
				next.ServeHTTP(w, r)
				return
			}
			writeAdmin(w, nil, ec2err.New(ec2err.CodeAuthFailure, "The admin token is not valid"))
			return
		}
		if header == "" {
			writeAdmin(w, nil, ec2err.New(ec2err.CodeMissingAuthenticationToken, "Admin requests need a SigV4 signature or an admin token"))
			return
		}
		if auth == nil {
			writeAdmin(w, nil, ec2err.New(ec2err.CodeAuthFailure, "Admin requests need the admin token"))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeAdmin(w, nil, ec2err.New(ec2err.CodeInvalidParameterValue, "The request body could not be read: %v", err))
			return
		}
		if err := auth.Verify(r, body); err != nil {
			writeAdmin(w, nil, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func writeAdmin(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		e := ec2err.As(err)
		w.WriteHeader(e.Status)
		_ = json.NewEncoder(w).Encode(map[string]string{"code": e.Code, "message": e.Message})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}
