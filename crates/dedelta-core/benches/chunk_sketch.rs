//! Criterion benchmarks (to be written).
fn main() {}
