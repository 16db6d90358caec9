//! Result files: deterministic bytes derived from the task id alone, so a test can recompute
//! the exact content (and its sha256) that a download must have stored. Generated lazily and
//! streamed in chunks; nothing is kept in memory.

use bytes::Bytes;
use futures::Stream;
use futures::StreamExt as _;
use sha2::{Digest, Sha256};

/// Smallest result file.
pub const FILE_MIN_BYTES: usize = 64 * 1024;
/// Largest result file.
pub const FILE_MAX_BYTES: usize = 256 * 1024;
/// Size of the streamed chunks (a multiple of the 8-byte word).
const CHUNK_BYTES: usize = 16 * 1024;

/// The length of a task's result file: 64–256 KiB, fixed by the task id.
pub fn file_len(task_id: &str) -> usize {
    let digest = Sha256::digest(format!("len:{task_id}").as_bytes());
    let n = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]) as usize;
    FILE_MIN_BYTES + n % (FILE_MAX_BYTES - FILE_MIN_BYTES + 1)
}

/// The whole content of a task's result file (what a download must yield).
pub fn file_content(task_id: &str) -> Vec<u8> {
    let len = file_len(task_id);
    let mut out = Vec::with_capacity(len);
    let mut offset = 0;
    while offset < len {
        let end = (offset + CHUNK_BYTES).min(len);
        out.extend_from_slice(&range(task_id, offset, end));
        offset = end;
    }
    out
}

/// Hex sha256 of [`file_content`].
pub fn file_sha256(task_id: &str) -> String {
    hex::encode(Sha256::digest(file_content(task_id)))
}

/// Bytes `[start, end)` of the file; `start` must be a multiple of 8. Each 8-byte word is
/// splitmix64 of its index, keyed by the task id's sha256: as fixed by the id as a hash chain,
/// at a nanosecond a word. (A sha256 per 32 bytes cost the simulator about a millisecond of
/// CPU per file, which the scale bench's saturated runs took from slotd's processes on the
/// same cores.)
fn range(task_id: &str, start: usize, end: usize) -> Vec<u8> {
    let digest = Sha256::digest(task_id.as_bytes());
    let key = u64::from_le_bytes([
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
    ]);
    let mut out = Vec::with_capacity(end - start + 8);
    let mut word = (start / 8) as u64;
    while start + out.len() < end {
        out.extend_from_slice(
            &splitmix64(key ^ word.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes(),
        );
        word += 1;
    }
    out.truncate(end - start);
    out
}

/// One step of splitmix64 (Steele, Lea and Flood): a cheap, well-mixed 64-bit function.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The file as a stream of chunks, generated on demand.
pub(crate) fn file_stream(
    task_id: String,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
    let len = file_len(&task_id);
    let starts = (0..len).step_by(CHUNK_BYTES);
    futures::stream::iter(starts).map(move |start| {
        let end = (start + CHUNK_BYTES).min(len);
        Ok(Bytes::from(range(&task_id, start, end)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stream_equals_content_and_is_stable() {
        let id = "842250903629086785";
        let len = file_len(id);
        assert!((FILE_MIN_BYTES..=FILE_MAX_BYTES).contains(&len));
        let streamed: Vec<u8> = file_stream(id.to_owned())
            .map(|c| c.map(|b| b.to_vec()).unwrap_or_default())
            .concat()
            .await;
        assert_eq!(streamed, file_content(id));
        assert_eq!(file_content(id), file_content(id));
        assert_ne!(file_content(id), file_content("842250903629086786"));
    }
}
