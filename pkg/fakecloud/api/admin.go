package api

import (
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// AdminRouter serves the run-time admin endpoints:
//
//	GET    /instances        instances and their attachments (JSON)
//	PUT    /instances/{id}   register or update an instance: {"zone":"…","instanceType":"…","attachmentLimit":N}
//	DELETE /instances/{id}   remove an instance, force-detaching its volumes
//	GET    /volumes          volumes with the host block device of each attachment
//	*      /faults           the fault injector's configuration (when faults is not nil)
func AdminRouter(st *state.State, faults http.Handler) http.Handler {
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
	return r
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
