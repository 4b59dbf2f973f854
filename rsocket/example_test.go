package rsocket_test

import (
	"bufio"
	"fmt"
	"log"

	"github.com/goiwarp/iwarp/rsocket"
)

// A line echo server and its client, as with package net.
func Example() {
	ln, err := rsocket.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "echo: %s", line)
	}()

	c, err := rsocket.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintln(c, "hello over RDMA")
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(reply)
	// Output: echo: hello over RDMA
}
