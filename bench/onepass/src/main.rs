//! One pass from a folder of wheels to a gzip venv layer, in memory (issue 21's cold path).
//!
//! imagegen's cold build today writes the venv in the daemon (pip), and reads it back three times
//! (the builder's layer commit, the export, the load). This measures the other design: every
//! wheel's files inflated straight into one tar stream, in a fixed order (wheel file name, then
//! entry name), mtimes fixed, compressed as it is written the way imagegen normalizes (level 1
//! raw DEFLATE in 4 MiB chunks, each compressed alone, the chunks on two threads) and hashed
//! (SHA-256: the diff ID). Nothing is written to disk.
//!
//! What it leaves out of a real install, so it is a floor, not a layer imagegen could push: the
//! `.data` folders' mapping (scripts, headers), entry-point scripts, RECORD and INSTALLER, the
//! venv itself (python links, pyvenv.cfg) and byte-compiled `.pyc` files.
//!
//! Usage: onepass WHEEL_FOLDER

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::time::Instant;

const CHUNK: usize = 4 << 20;
const THREADS: usize = 2;
const MTIME: u64 = 1_700_000_000;

/// Raw DEFLATE at level 1 of one chunk; the last chunk ends the stream.
fn deflate_chunk(chunk: &[u8], last: bool) -> usize {
    use miniz_oxide::deflate::core::{
        compress, create_comp_flags_from_zip_params, CompressorOxide, TDEFLFlush,
    };
    let mut compressor = CompressorOxide::new(create_comp_flags_from_zip_params(1, 0, 0));
    let flush = if last {
        TDEFLFlush::Finish
    } else {
        TDEFLFlush::Sync
    };
    let mut out = vec![0; chunk.len() + chunk.len() / 64 + 1024];
    let (_, consumed, written) = compress(&mut compressor, chunk, &mut out, flush);
    assert_eq!(consumed, chunk.len(), "a chunk left unfinished");
    written
}

/// Counts the gzip bytes of what is written (the bytes themselves are dropped) and hashes it.
struct Compressor {
    current: Vec<u8>,
    full: Vec<Vec<u8>>,
    compressed: usize,
    size: u64,
    sha256: Sha256,
}

impl Compressor {
    fn compress(&mut self, chunks: Vec<Vec<u8>>, last: bool) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let sha256 = &mut self.sha256;
        let compressed = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|_| {
                    scope.spawn(|| {
                        let mut bytes = 0;
                        loop {
                            let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if index >= chunks.len() {
                                return bytes;
                            }
                            let ends = last && index == chunks.len() - 1;
                            bytes += deflate_chunk(&chunks[index], ends);
                        }
                    })
                })
                .collect();
            for chunk in &chunks {
                sha256.update(chunk);
            }
            workers
                .into_iter()
                .map(|worker| worker.join().unwrap())
                .sum::<usize>()
        });
        // The gzip header and trailer.
        self.compressed += compressed + if last { 18 } else { 0 };
    }
}

impl Write for Compressor {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let mut rest = data;
        while !rest.is_empty() {
            if self.current.len() == CHUNK {
                let full = std::mem::replace(&mut self.current, Vec::with_capacity(CHUNK));
                self.full.push(full);
                if self.full.len() == 2 * THREADS {
                    let chunks = std::mem::take(&mut self.full);
                    self.compress(chunks, false);
                }
            }
            let take = (CHUNK - self.current.len()).min(rest.len());
            self.current.extend_from_slice(&rest[..take]);
            self.size += take as u64;
            rest = &rest[take..];
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn main() {
    let folder = std::env::args()
        .nth(1)
        .expect("usage: onepass WHEEL_FOLDER");
    let started = Instant::now();
    let mut wheels: Vec<_> = std::fs::read_dir(&folder)
        .expect("the wheel folder")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "whl"))
        .collect();
    wheels.sort();
    let compressor = Compressor {
        current: Vec::with_capacity(CHUNK),
        full: Vec::new(),
        compressed: 0,
        size: 0,
        sha256: Sha256::new(),
    };
    let mut builder = tar::Builder::new(compressor);
    let mut files = 0;
    let mut inflating = 0.0;
    for wheel in &wheels {
        let mut archive = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
        let mut names: Vec<(String, usize)> = (0..archive.len())
            .map(|index| {
                (
                    archive.by_index_raw(index).unwrap().name().to_string(),
                    index,
                )
            })
            .collect();
        names.sort();
        for (name, index) in names {
            let inflated = Instant::now();
            let mut entry = archive.by_index(index).unwrap();
            if entry.is_dir() {
                continue;
            }
            let mut data = Vec::with_capacity(entry.size() as usize);
            entry.read_to_end(&mut data).unwrap();
            let executable = entry.unix_mode().is_some_and(|mode| mode & 0o111 != 0);
            inflating += inflated.elapsed().as_secs_f64();
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(if executable { 0o755 } else { 0o644 });
            header.set_mtime(MTIME);
            header.set_entry_type(tar::EntryType::Regular);
            let path = format!("opt/venv/lib/python3/site-packages/{name}");
            builder
                .append_data(&mut header, path, data.as_slice())
                .unwrap();
            files += 1;
        }
    }
    let mut compressor = builder.into_inner().unwrap();
    let mut chunks = std::mem::take(&mut compressor.full);
    chunks.push(std::mem::take(&mut compressor.current));
    compressor.compress(chunks, true);
    println!(
        "one pass: {} wheels, {} files: {:.2} GB unpacked -> {:.2} GB gzip in {:.1} s ({:.1} s of it inflating, on one thread); diff id sha256:{:x}",
        wheels.len(),
        files,
        compressor.size as f64 / 1e9,
        compressor.compressed as f64 / 1e9,
        started.elapsed().as_secs_f64(),
        inflating,
        compressor.sha256.finalize()
    );
}
