// Package codeshape holds crew's code to its shape (shape_test.go): no
// type with more than 40 methods, no function longer than 80 lines.
package codeshape
