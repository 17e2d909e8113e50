//! Integration tests of the evaluation harness, one module per dataset or command.

mod container_size;
mod redis;
