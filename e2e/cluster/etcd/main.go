// Command etcd runs etcd's own server from its Go module. Debian's etcd-server (3.4.23) lacks the watch
// progress requests that kube-apiserver's watch cache needs to serve consistent reads, without which the
// controllers keep reading stale caches and run tens of seconds behind.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
