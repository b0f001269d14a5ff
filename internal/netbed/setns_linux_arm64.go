package netbed

// sysSetns is setns(2)'s number on linux/arm64 (package syscall lacks it).
const sysSetns = 268
