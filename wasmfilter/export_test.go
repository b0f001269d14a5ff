package wasmfilter

// CPUTime exports cpuTime to the external test package's benchmarks.
var CPUTime = cpuTime

// PerAddress and KeyedConfig export the configuration builders of the
// package's tests to the .wasm tests.
var PerAddress, KeyedConfig = perAddress, keyedConfig
