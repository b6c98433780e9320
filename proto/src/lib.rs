//! Generated protocol code (placeholder until the Mixer v1 protos land).
