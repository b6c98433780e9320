//! The `mixer` binary.

// Every check and report allocates (bags, instances, protobuf messages) on many threads at
// once; mimalloc's per-thread free lists cost less CPU per request than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    mixer_server::main()
}
