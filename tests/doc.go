// Package tests holds sandboxd's end-to-end tests: they build the real
// binary, start it as a daemon with a private state directory, and drive it
// through the real client over unix sockets and TCP, the way an agent does.
//
// Components the tests need (bash, python3, ...) are required when the CI
// environment variable is set: a missing one fails the test there, and only
// skips it elsewhere, saying why.
package tests
