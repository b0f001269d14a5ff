package netbed

// sysSetns is setns(2)'s number on linux/amd64 (package syscall lacks it).
const sysSetns = 308
