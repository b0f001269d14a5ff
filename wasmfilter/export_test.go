package wasmfilter

// CPUTime exports cpuTime to the external test package's benchmarks.
var CPUTime = cpuTime
