package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Args[1], ",")})
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 3000; i += 16 {
				if _, err := cli.Put(context.Background(), fmt.Sprintf("/k/%05d", i), strings.Repeat("x", 4096)); err != nil {
					panic(err)
				}
			}
		}()
	}
	wg.Wait()
}
