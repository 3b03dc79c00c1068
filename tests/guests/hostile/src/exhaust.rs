//! Resource exhaustion: a pure-CPU loop that never yields and an allocation that never stops.
//! Neither returns; the host's deadline and memory cap must end them.

/// Size of each buffer `hoard` keeps.
const CHUNK: usize = 1 << 20;
/// Stride at which `hoard` writes, so every page is really committed.
const PAGE: usize = 4096;

/// Spin forever without calling the host.
pub fn spin() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = std::hint::black_box(counter.wrapping_add(1));
    }
}

/// Keep allocating 1 MiB buffers, touching each page, never freeing; ends in a trap when the
/// host refuses to grow memory (Rust aborts on allocation failure).
pub fn hoard() -> ! {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; CHUNK];
        for byte in chunk.iter_mut().step_by(PAGE) {
            *byte = 1;
        }
        kept.push(std::hint::black_box(chunk));
    }
}
