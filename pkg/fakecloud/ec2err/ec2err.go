// Package ec2err holds the errors fakecloud answers with, worded and coded as EC2 words them, and the XML
// envelope that carries them. Every layer of fakecloud (wire, state, faults, auth) speaks these errors, so the
// HTTP status of a code is decided here once.
package ec2err

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// Error is an EC2 API error: a code from EC2's vocabulary, a message, and the HTTP status EC2 sends with it.
type Error struct {
	Code    string
	Message string
	Status  int
	cause   error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap gives the failure behind an InternalError, for logs.
func (e *Error) Unwrap() error { return e.cause }

// Codes used by fakecloud. Their HTTP statuses are in statusOf.
const (
	CodeInvalidAction                 = "InvalidAction"
	CodeMissingParameter              = "MissingParameter"
	CodeInvalidParameterValue         = "InvalidParameterValue"
	CodeInvalidParameterCombination   = "InvalidParameterCombination"
	CodeInvalidParameterDependency    = "InvalidParameterDependency"
	CodeUnknownParameter              = "UnknownParameter"
	CodeInvalidPaginationToken        = "InvalidPaginationToken"
	CodeInvalidFilter                 = "InvalidFilter"
	CodeDryRunOperation               = "DryRunOperation"
	CodeAuthFailure                   = "AuthFailure"
	CodeMissingAuthenticationToken    = "MissingAuthenticationToken"
	CodeInternalError                 = "InternalError"
	CodeRequestLimitExceeded          = "RequestLimitExceeded"
	CodeServiceUnavailable            = "Unavailable"
	CodeInvalidVolumeNotFound         = "InvalidVolume.NotFound"
	CodeInvalidVolumeIDMalformed      = "InvalidVolumeID.Malformed"
	CodeInvalidTagKeyMalformed        = "InvalidTagKey.Malformed"
	CodeInvalidVolumeZoneMismatch     = "InvalidVolume.ZoneMismatch"
	CodeInvalidSnapshotNotFound       = "InvalidSnapshot.NotFound"
	CodeInvalidSnapshotIDMalformed    = "InvalidSnapshotID.Malformed"
	CodeInvalidInstanceIDNotFound     = "InvalidInstanceID.NotFound"
	CodeInvalidInstanceIDMalformed    = "InvalidInstanceID.Malformed"
	CodeInvalidAttachmentNotFound     = "InvalidAttachment.NotFound"
	CodeInvalidZoneNotFound           = "InvalidZone.NotFound"
	CodeInvalidVolumeModNotFound      = "InvalidVolumeModification.NotFound"
	CodeInvalidID                     = "InvalidID"
	CodeVolumeInUse                   = "VolumeInUse"
	CodeIncorrectState                = "IncorrectState"
	CodeIncorrectModificationState    = "IncorrectModificationState"
	CodeVolumeModificationRateExceed  = "VolumeModificationRateExceeded"
	CodeOperationNotPermitted         = "OperationNotPermitted"
	CodeAttachmentLimitExceeded       = "AttachmentLimitExceeded"
	CodeIdempotentParameterMismatch   = "IdempotentParameterMismatch"
	CodeVolumeLimitExceeded           = "VolumeLimitExceeded"
	CodeSnapshotLimitExceeded         = "SnapshotLimitExceeded"
	CodeUnsupportedOperation          = "UnsupportedOperation"
	CodeIncorrectInstanceState        = "IncorrectInstanceState"
	CodeInvalidInstanceAttributeValue = "InvalidInstanceAttributeValue"
	CodeInvalidSnapshotInUse          = "InvalidSnapshot.InUse"
	CodeInvalidParameter              = "InvalidParameter"
	CodeUnauthorizedOperation         = "UnauthorizedOperation"
	CodeInsufficientVolumeCapacity    = "InsufficientVolumeCapacity"
	CodeInvalidVolumeModificationSize = "VolumeModificationSizeLimitExceeded"
	CodeInvalidInstanceType           = "InvalidInstanceType"
	CodeTagLimitExceeded              = "TagLimitExceeded"
	CodeInvalidAMIIDMalformed         = "InvalidAMIID.Malformed"
	CodeInvalidAMIIDNotFound          = "InvalidAMIID.NotFound"
	CodeInvalidSubnetIDNotFound       = "InvalidSubnetID.NotFound"
	CodeInvalidBlockDeviceMapping     = "InvalidBlockDeviceMapping"
	CodeVcpuLimitExceeded             = "VcpuLimitExceeded"
	// CodeNoSuchVersion answers an API version the service does not have (AWS's common Query error; the
	// wording is unverified against EC2).
	CodeNoSuchVersion = "NoSuchVersion"
)

// statusOf gives the HTTP status EC2 sends with a code; everything else is a 400 client error.
func statusOf(code string) int {
	switch code {
	case CodeAuthFailure, CodeMissingAuthenticationToken:
		return http.StatusUnauthorized
	case CodeUnauthorizedOperation:
		return http.StatusForbidden
	case CodeDryRunOperation:
		return http.StatusPreconditionFailed
	case CodeInternalError, CodeInsufficientVolumeCapacity:
		return http.StatusInternalServerError
	case CodeRequestLimitExceeded, CodeServiceUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusBadRequest
	}
}

// A message may echo what a request sent (an ID, a value): maxMessage bounds it, so that a hostile request cannot
// make the reply large, and maxEcho bounds an echoed value, so that the reason after it is still read.
const (
	maxMessage = 1024
	maxEcho    = 128
)

// New returns an error with the given code and a formatted message, carrying the code's HTTP status.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: bounded(fmt.Sprintf(format, args...), maxMessage), Status: statusOf(code)}
}

// bounded cuts s to at most n bytes on a character boundary, marking the cut.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Missing reports a required parameter that the request lacks.
func Missing(param string) *Error {
	return New(CodeMissingParameter, "The request must contain the parameter %s", param)
}

// InvalidValue reports a parameter whose value EC2 would refuse.
func InvalidValue(param, value, why string) *Error {
	value = bounded(value, maxEcho)
	if why == "" {
		return New(CodeInvalidParameterValue, "Value (%s) for parameter %s is invalid.", value, param)
	}
	return New(CodeInvalidParameterValue, "Value (%s) for parameter %s is invalid. %s", value, param, why)
}

// DryRun is the answer to a DryRun request that would have succeeded.
func DryRun() *Error {
	return New(CodeDryRunOperation, "Request would have succeeded, but DryRun flag is set.")
}

// Internal wraps an unexpected failure (a backend error) as EC2's InternalError, keeping the cause unwrappable.
func Internal(cause error) *Error {
	return &Error{Code: CodeInternalError, Message: "An internal error has occurred", Status: http.StatusInternalServerError, cause: cause}
}

// As returns err as an *Error, turning anything else into an InternalError.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Internal(err)
}

// HasCode reports whether err is an EC2 error with the given code.
func HasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

type envelope struct {
	XMLName   xml.Name      `xml:"Response"`
	Errors    []errorRecord `xml:"Errors>Error"`
	RequestID string        `xml:"RequestID"`
}

type errorRecord struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// Write sends err in EC2's error envelope with its HTTP status.
func Write(w http.ResponseWriter, requestID string, err error) {
	e := As(err)
	body, _ := xml.Marshal(envelope{Errors: []errorRecord{{Code: e.Code, Message: e.Message}}, RequestID: requestID})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.Status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(body)
}
