// Package imds serves the EC2 instance metadata service (IMDSv2 only) for one instance of fakecloud, so that a
// node plugin learns who it is (instance ID, type, zone) the way it does on EC2, without cloud credentials.
//
// EC2 serves metadata at a link-local address seen from inside each instance; here each instance gets a listener
// of its own (the SDK's imds client replaces the request path with its own, so instances cannot share one
// address under different path prefixes).
//
// meta-data/block-device-mapping/ lists ami, root and one ebsN per data volume attached to the instance as of its last
// start, as EC2 does ("Amazon EBS volumes are only available in metadata if they were present at launch time or
// when the instance was last started"): every attachment that held one of the instance's slots (attaching,
// attached, detaching or busy) when it last went running is an ebsN, numbered from 1 in order of attachment,
// answering its device name without /dev/ ("xvdba"). A volume attached since is missing until the next start; one
// detached since is still listed until then.
//
// meta-data/network/interfaces/macs/ lists one entry per network interface attached to the instance: the
// primary one, and as many more as the instance was registered with (networkInterfaces). Each has a stable MAC
// made from the instance ID and the interface's device number, and answers device-number, interface-id and mac.
package imds

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// Headers of IMDSv2.
const (
	TokenHeader    = "X-aws-ec2-metadata-token"
	TokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds"
	maxTokenTTL    = 21600
	// maxTokens bounds the token table: a client that asks for a token per call cannot grow it without end.
	maxTokens = 4096
)

// RootDevice is the device name of every instance's root volume, which fakecloud reserves.
const RootDevice = "/dev/xvda"

// Source is where metadata comes from: fakecloud's state.
type Source interface {
	DescribeInstances(in state.DescribeInput) ([]state.InstanceView, string, error)
	Region() string
	Zones() []state.Zone
	AccountID() string
}

// Handler serves one instance's metadata.
type Handler struct {
	src        Source
	instanceID string
	now        func() time.Time

	mu     sync.Mutex
	tokens map[string]time.Time // token → expiry
}

// New returns the metadata service of instanceID.
func New(src Source, instanceID string) *Handler {
	return &Handler{src: src, instanceID: instanceID, now: time.Now, tokens: map[string]time.Time{}}
}

// Router is the HTTP interface.
func (h *Handler) Router() http.Handler {
	r := chi.NewRouter()
	r.Put("/latest/api/token", h.putToken)
	r.Get("/latest/*", h.get)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "Not Found", http.StatusNotFound) })
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	})
	return r
}

func (h *Handler) putToken(w http.ResponseWriter, r *http.Request) {
	// As on EC2: a token request that went through a proxy is refused, so a token cannot leave the instance.
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(TokenTTLHeader))
	if err != nil || ttl < 1 || ttl > maxTokenTTL {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	token := base64.RawURLEncoding.EncodeToString(buf)
	h.mu.Lock()
	h.dropExpired()
	if len(h.tokens) >= maxTokens {
		h.dropOldest()
	}
	h.tokens[token] = h.now().Add(time.Duration(ttl) * time.Second)
	h.mu.Unlock()
	w.Header().Set(TokenTTLHeader, strconv.Itoa(ttl))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(token))
}

// dropExpired and dropOldest run under mu.
func (h *Handler) dropExpired() {
	now := h.now()
	for t, exp := range h.tokens {
		if !now.Before(exp) {
			delete(h.tokens, t)
		}
	}
}

func (h *Handler) dropOldest() {
	var oldest string
	var at time.Time
	for t, exp := range h.tokens {
		if oldest == "" || exp.Before(at) {
			oldest, at = t, exp
		}
	}
	delete(h.tokens, oldest)
}

func (h *Handler) validToken(token string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	exp, ok := h.tokens[token]
	return ok && h.now().Before(exp)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	// IMDSv2 only: no token, or an unknown or expired one, is 401 as on an instance that requires tokens.
	if !h.validToken(r.Header.Get(TokenHeader)) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	view, err := h.instance()
	if err != nil {
		var e *ec2err.Error
		if errors.As(err, &e) && e.Code == ec2err.CodeInvalidInstanceIDNotFound {
			http.Error(w, "Not Found", http.StatusNotFound)
			return
		}
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	body, ok := h.document(view, strings.TrimPrefix(r.URL.Path, "/latest/"))
	if !ok {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	if strings.HasPrefix(body, "{") {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/plain")
	}
	_, _ = w.Write([]byte(body))
}

func (h *Handler) instance() (state.InstanceView, error) {
	views, _, err := h.src.DescribeInstances(state.DescribeInput{IDs: []string{h.instanceID}})
	if err != nil {
		return state.InstanceView{}, err
	}
	if len(views) != 1 {
		return state.InstanceView{}, ec2err.New(ec2err.CodeInvalidInstanceIDNotFound, "The instance ID '%s' does not exist", h.instanceID)
	}
	return views[0], nil
}

// identityDocument is EC2's instance identity document, the fields a client reads.
type identityDocument struct {
	AccountID        string    `json:"accountId"`
	Architecture     string    `json:"architecture"`
	AvailabilityZone string    `json:"availabilityZone"`
	ImageID          string    `json:"imageId"`
	InstanceID       string    `json:"instanceId"`
	InstanceType     string    `json:"instanceType"`
	PendingTime      time.Time `json:"pendingTime"`
	Region           string    `json:"region"`
	Version          string    `json:"version"`
}

// document answers one metadata path.
func (h *Handler) document(v state.InstanceView, path string) (string, bool) {
	zoneID := ""
	for _, z := range h.src.Zones() {
		if z.Name == v.Zone {
			zoneID = z.ID
		}
	}
	if rest, ok := strings.CutPrefix(path, "meta-data/network/interfaces/macs/"); ok && rest != "" {
		return interfaceDocument(v, rest)
	}
	if n, ok := strings.CutPrefix(path, "meta-data/block-device-mapping/ebs"); ok {
		i, err := strconv.Atoi(n)
		devices := v.StartDevices
		if err != nil || n != strconv.Itoa(i) || i < 1 || i > len(devices) {
			return "", false
		}
		return devices[i-1], true
	}
	switch path {
	case "meta-data", "meta-data/":
		return strings.Join([]string{"ami-id", "block-device-mapping/", "instance-id", "instance-type", "network/", "placement/"}, "\n"), true
	case "meta-data/network", "meta-data/network/":
		return "interfaces/", true
	case "meta-data/network/interfaces", "meta-data/network/interfaces/":
		return "macs/", true
	case "meta-data/network/interfaces/macs", "meta-data/network/interfaces/macs/":
		var macs []string
		for i := range interfaceCount(v) {
			macs = append(macs, mac(v.ID, i)+"/")
		}
		return strings.Join(macs, "\n"), true
	case "meta-data/ami-id":
		return v.ImageID(), true
	case "meta-data/instance-id":
		return v.ID, true
	case "meta-data/instance-type":
		return v.InstanceType, true
	case "meta-data/placement", "meta-data/placement/":
		return "availability-zone\navailability-zone-id\nregion", true
	case "meta-data/placement/availability-zone":
		return v.Zone, true
	case "meta-data/placement/availability-zone-id":
		return zoneID, zoneID != ""
	case "meta-data/placement/region":
		return h.src.Region(), true
	case "meta-data/block-device-mapping", "meta-data/block-device-mapping/":
		names := []string{"ami"}
		for i := range v.StartDevices {
			names = append(names, "ebs"+strconv.Itoa(i+1))
		}
		return strings.Join(append(names, "root"), "\n"), true
	case "meta-data/block-device-mapping/ami", "meta-data/block-device-mapping/root":
		return RootDevice, true
	case "dynamic/instance-identity/document":
		doc, err := json.MarshalIndent(identityDocument{AccountID: h.src.AccountID(), Architecture: v.Architecture(),
			AvailabilityZone: v.Zone, ImageID: v.ImageID(), InstanceID: v.ID, InstanceType: v.InstanceType,
			PendingTime: v.LaunchTime.UTC(), Region: h.src.Region(), Version: "2017-09-30"}, "", "  ")
		return string(doc), err == nil
	}
	return "", false
}

// interfaceCount is how many network interfaces the instance has: the primary one at least.
func interfaceCount(v state.InstanceView) int {
	return max(v.NetworkInterfaces, 1)
}

// mac is the MAC address of the instance's interface at device number i: locally administered, from a hash of
// the instance ID, so that it stays the same from call to call and from restart to restart.
func mac(instanceID string, i int) string {
	sum := sha256.Sum256([]byte(instanceID))
	return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", sum[0], sum[1], sum[2], sum[3], byte(i))
}

// interfaceDocument answers a path under network/interfaces/macs/: "<mac>/" lists the keys, "<mac>/<key>" one.
func interfaceDocument(v state.InstanceView, rest string) (string, bool) {
	addr, key, _ := strings.Cut(rest, "/")
	for i := range interfaceCount(v) {
		if mac(v.ID, i) != addr {
			continue
		}
		switch key {
		case "":
			return "device-number\ninterface-id\nmac", true
		case "device-number":
			return strconv.Itoa(i), true
		case "interface-id":
			// An ENI ID of 17 hex digits, from the same hash as the MAC.
			sum := sha256.Sum256([]byte(v.ID))
			return fmt.Sprintf("eni-%x%03x", sum[:7], i), true
		case "mac":
			return addr, true
		}
	}
	return "", false
}
