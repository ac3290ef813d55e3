// SPDX-License-Identifier: LGPL-2.1-or-later

// A Go program linked with the C library (cgo), for tests/bpf/record-go.sh: its C code mallocs
// and leaks N blocks of SIZE bytes, while its Go code grows the Go heap by about 256 MiB, which
// the runtime reserves (PROT_NONE) and commits (read-write, MAP_FIXED) with mmap through cgo.
// Prints "TRUTH_BYTES <n>": the bytes malloc was asked for.
//
//	wl_go N SIZE
package main

/*
#include <stdlib.h>

static void *volatile wl_go_sink;

static void wl_go_malloc(size_t size)
{
	wl_go_sink = malloc(size);
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
)

var keep [][]byte

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	size, _ := strconv.Atoi(os.Args[2])
	for i := 0; i < n; i++ {
		C.wl_go_malloc(C.size_t(size))
	}
	for i := 0; i < 64; i++ {
		keep = append(keep, make([]byte, 4<<20))
	}
	runtime.GC()
	fmt.Printf("TRUTH_BYTES %d\n", n*size)
}
