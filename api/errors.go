package api

import (
	"fmt"
)

// Code is an error code of the wire contract. Every non-2xx answer carries one.
type Code string

// The error codes of the API. The HTTP status of each lives in one table in
// the daemon; clients map them back to the sentinel errors below.
const (
	CodeInvalidArgument   Code = "invalid_argument"
	CodeUnauthenticated   Code = "unauthenticated"
	CodePermissionDenied  Code = "permission_denied"
	CodeNotFound          Code = "not_found"
	CodeConflict          Code = "conflict"
	CodeTooLarge          Code = "too_large"
	CodeResourceExhausted Code = "resource_exhausted"
	CodeUnsupported       Code = "unsupported"
	CodeUnavailable       Code = "unavailable"
	CodeDeadlineExceeded  Code = "deadline_exceeded"
	CodeInternal          Code = "internal"
)

// codeError is a sentinel: one per Code, compared by identity with errors.Is.
type codeError struct{ code Code }

func (e *codeError) Error() string { return string(e.code) }

// The error classification shared by every package of sandboxd. Wrap one of
// these (with Errorf or %w) to say what kind of failure an error is; the
// daemon turns the class into the API code and the client turns the code back
// into the same sentinel, so errors.Is works across the wire.
var (
	ErrInvalidArgument   error = &codeError{CodeInvalidArgument}
	ErrUnauthenticated   error = &codeError{CodeUnauthenticated}
	ErrPermissionDenied  error = &codeError{CodePermissionDenied}
	ErrNotFound          error = &codeError{CodeNotFound}
	ErrConflict          error = &codeError{CodeConflict}
	ErrTooLarge          error = &codeError{CodeTooLarge}
	ErrResourceExhausted error = &codeError{CodeResourceExhausted}
	ErrUnsupported       error = &codeError{CodeUnsupported}
	ErrUnavailable       error = &codeError{CodeUnavailable}
	ErrDeadlineExceeded  error = &codeError{CodeDeadlineExceeded}
	ErrInternal          error = &codeError{CodeInternal}
)

var sentinels = []error{
	ErrInvalidArgument, ErrUnauthenticated, ErrPermissionDenied, ErrNotFound,
	ErrConflict, ErrTooLarge, ErrResourceExhausted, ErrUnsupported,
	ErrUnavailable, ErrDeadlineExceeded, ErrInternal,
}

// classified is an error with a message of its own, a class, and optionally
// the error that caused it.
type classified struct {
	class error
	msg   string
	cause error
}

func (e *classified) Error() string { return e.msg }

func (e *classified) Unwrap() []error {
	if e.cause == nil {
		return []error{e.class}
	}
	return []error{e.class, e.cause}
}

// Errorf returns an error of the given class (one of the Err* sentinels) whose
// message is the formatted text: the one clear sentence the caller reads. A %w
// verb in format keeps its operand inspectable with errors.Is and errors.As.
func Errorf(class error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	var cause error
	// fmt.Errorf wraps only when the format has %w; then it is the cause
	// (one or several of them: errors.Is walks fmt's wrapper).
	if _, ok := err.(interface{ Unwrap() error }); ok {
		cause = err
	} else if _, ok := err.(interface{ Unwrap() []error }); ok {
		cause = err
	}
	return &classified{class: class, msg: err.Error(), cause: cause}
}

// CodeOf classifies err by the outermost class in its chain: an error
// classified as unavailable that wraps a not_found is unavailable. Errors
// of no class are internal.
func CodeOf(err error) Code {
	if c, ok := outerClass(err); ok {
		return c
	}
	return CodeInternal
}

// outerClass walks err's tree depth first, outermost first.
func outerClass(err error) (Code, bool) {
	switch e := err.(type) {
	case nil:
		return "", false
	case *codeError:
		return e.code, true
	case *classified:
		return e.class.(*codeError).code, true
	case interface{ Unwrap() error }:
		return outerClass(e.Unwrap())
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if c, ok := outerClass(inner); ok {
				return c, true
			}
		}
	}
	return "", false
}

// ErrorOf returns the sentinel of a code, or ErrInternal for an unknown one.
func ErrorOf(code Code) error {
	for _, s := range sentinels {
		if s.(*codeError).code == code {
			return s
		}
	}
	return ErrInternal
}

// ErrorBody is the body of every non-2xx answer.
type ErrorBody struct {
	Error ErrorInfo `json:"error"`
}

// ErrorInfo is the code and the one-sentence message of an error.
type ErrorInfo struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}
