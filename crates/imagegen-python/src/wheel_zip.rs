//! One member of a wheel (a zip file) from the few byte ranges an HTTP server hands out: the tail
//! (end of central directory, ZIP64 included), the central directory or the part of it the tail
//! holds, the member's local header, and its data. `knowledge derive` reads a wheel's
//! `*.dist-info/METADATA` this way when the index serves no PEP 658 `.metadata` file, so a 2 GB
//! torch wheel costs a few hundred kB. Pure: byte slices in, offsets and text out; the requests
//! are made by the caller (imagegen's `docker::pypi_index`).

/// How many bytes of a wheel's tail to ask for first: the end of central directory record (22
/// bytes plus a comment of at most 64 kB), the ZIP64 locator and record, and in practice the end
/// of the central directory, where `bdist_wheel` writes the `.dist-info` members.
pub const TAIL_BYTES: u64 = 256 * 1024;

/// The largest METADATA member inflated (torch's is a few kB).
const MAX_METADATA_BYTES: usize = 4 * 1024 * 1024;

const END_OF_CENTRAL_DIRECTORY: u32 = 0x0605_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;
const ZIP64_END_OF_CENTRAL_DIRECTORY: u32 = 0x0606_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const LOCAL_HEADER: u32 = 0x0403_4b50;
/// A local file header's fixed part.
pub const LOCAL_HEADER_BYTES: u64 = 30;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WheelZipError {
    #[error("not a zip file: {0}")]
    Format(String),
    #[error("the wheel has no {0} member")]
    NoMember(String),
    #[error(
        "the METADATA member is compressed with method {0} (only stored and DEFLATE are read)"
    )]
    Method(u16),
    #[error("the METADATA member does not inflate: {0}")]
    Inflate(String),
}

/// Where the central directory lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CentralDirectory {
    pub offset: u64,
    pub size: u64,
}

/// One central directory entry: what is needed to fetch and inflate the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub method: u16,
    pub compressed_size: u64,
    pub uncompressed_size: u64,
    pub local_header_offset: u64,
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

fn format_error(why: &str) -> WheelZipError {
    WheelZipError::Format(why.to_string())
}

/// The central directory's place, from the file's last bytes (`tail`, which starts at
/// `tail_start` in the file).
pub fn central_directory(tail: &[u8], tail_start: u64) -> Result<CentralDirectory, WheelZipError> {
    // The record is 22 bytes plus a comment; search backwards for its signature.
    let end = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&at| u32_at(tail, at) == Some(END_OF_CENTRAL_DIRECTORY))
        .ok_or_else(|| format_error("no end of central directory record in the last bytes"))?;
    let size = u64::from(u32_at(tail, end + 12).unwrap_or_default());
    let offset = u64::from(u32_at(tail, end + 16).unwrap_or_default());
    if size != u64::from(u32::MAX) && offset != u64::from(u32::MAX) {
        return Ok(CentralDirectory { offset, size });
    }
    // ZIP64: the locator sits right before the record and points at the ZIP64 record.
    let locator = end
        .checked_sub(20)
        .filter(|&at| u32_at(tail, at) == Some(ZIP64_LOCATOR))
        .ok_or_else(|| format_error("ZIP64 sizes without a ZIP64 locator"))?;
    let record_offset = u64_at(tail, locator + 8).unwrap_or_default();
    let record = record_offset
        .checked_sub(tail_start)
        .and_then(|at| usize::try_from(at).ok())
        .filter(|&at| u32_at(tail, at) == Some(ZIP64_END_OF_CENTRAL_DIRECTORY))
        .ok_or_else(|| {
            format_error("the ZIP64 end of central directory is not in the last bytes")
        })?;
    match (u64_at(tail, record + 40), u64_at(tail, record + 48)) {
        (Some(size), Some(offset)) => Ok(CentralDirectory { offset, size }),
        _ => Err(format_error("a truncated ZIP64 end of central directory")),
    }
}

/// Parses the central directory entry at `at`; `None` when the bytes there are not one.
fn entry_at(directory: &[u8], at: usize) -> Option<(Member, usize)> {
    if u32_at(directory, at)? != CENTRAL_HEADER {
        return None;
    }
    let method = u16_at(directory, at + 10)?;
    let mut compressed_size = u64::from(u32_at(directory, at + 20)?);
    let mut uncompressed_size = u64::from(u32_at(directory, at + 24)?);
    let name_length = usize::from(u16_at(directory, at + 28)?);
    let extra_length = usize::from(u16_at(directory, at + 30)?);
    let comment_length = usize::from(u16_at(directory, at + 32)?);
    let mut local_header_offset = u64::from(u32_at(directory, at + 42)?);
    let name_start = at + 46;
    let name = String::from_utf8(
        directory
            .get(name_start..name_start + name_length)?
            .to_vec(),
    )
    .ok()?;
    let extra = directory.get(name_start + name_length..name_start + name_length + extra_length)?;
    // The ZIP64 extra field (0x0001) holds, in this order, the values whose 32-bit field is full.
    let mut cursor = 0;
    while cursor + 4 <= extra.len() {
        let id = u16_at(extra, cursor)?;
        let length = usize::from(u16_at(extra, cursor + 2)?);
        if id == 0x0001 {
            let mut field = cursor + 4;
            for value in [
                &mut uncompressed_size,
                &mut compressed_size,
                &mut local_header_offset,
            ] {
                if *value == u64::from(u32::MAX) {
                    *value = u64_at(extra, field)?;
                    field += 8;
                }
            }
        }
        cursor += 4 + length;
    }
    let next = name_start + name_length + extra_length + comment_length;
    Some((
        Member {
            name,
            method,
            compressed_size,
            uncompressed_size,
            local_header_offset,
        },
        next,
    ))
}

/// Every entry of a whole central directory.
pub(crate) fn members(directory: &[u8]) -> Result<Vec<Member>, WheelZipError> {
    let mut found = Vec::new();
    let mut at = 0;
    while at < directory.len() {
        let (member, next) = entry_at(directory, at).ok_or_else(|| {
            format_error(&format!(
                "no central directory entry at byte {at} of the directory"
            ))
        })?;
        found.push(member);
        at = next;
    }
    Ok(found)
}

/// Whether `name` is the METADATA of the wheel's own `.dist-info` directory (top level).
pub(crate) fn is_metadata(name: &str) -> bool {
    name.strip_suffix(".dist-info/METADATA")
        .is_some_and(|directory| !directory.is_empty() && !directory.contains('/'))
}

/// The METADATA entry found in a part of the central directory (such as the part the tail
/// holds) by its signature; the caller confirms it against the local header's name.
pub fn metadata_in_part(part: &[u8]) -> Option<Member> {
    (0..part.len().saturating_sub(3))
        .filter(|&at| u32_at(part, at) == Some(CENTRAL_HEADER))
        .filter_map(|at| entry_at(part, at).map(|(member, _)| member))
        .find(|member| is_metadata(&member.name))
}

/// The METADATA entry of a whole central directory.
pub fn metadata_member(directory: &[u8]) -> Result<Member, WheelZipError> {
    members(directory)?
        .into_iter()
        .find(|member| is_metadata(&member.name))
        .ok_or_else(|| WheelZipError::NoMember("*.dist-info/METADATA".into()))
}

/// Where the member's data starts, from its local header (the fixed part and at least the name):
/// the header's own name and extra lengths count, not the central directory's.
pub fn data_offset(member: &Member, header: &[u8]) -> Result<u64, WheelZipError> {
    if u32_at(header, 0) != Some(LOCAL_HEADER) {
        return Err(format_error(&format!(
            "no local header at byte {} for {}",
            member.local_header_offset, member.name
        )));
    }
    let name_length = u16_at(header, 26).unwrap_or_default();
    let extra_length = u16_at(header, 28).unwrap_or_default();
    let name = header
        .get(30..30 + usize::from(name_length))
        .map(|n| String::from_utf8_lossy(n).to_string());
    if name.as_deref() != Some(member.name.as_str()) {
        return Err(format_error(&format!(
            "the local header at byte {} names {:?}, not {}",
            member.local_header_offset, name, member.name
        )));
    }
    Ok(member.local_header_offset
        + LOCAL_HEADER_BYTES
        + u64::from(name_length)
        + u64::from(extra_length))
}

/// The member's text from its (compressed) data.
pub fn inflate(member: &Member, data: &[u8]) -> Result<String, WheelZipError> {
    let bytes = match member.method {
        0 => data.to_vec(),
        8 => miniz_oxide::inflate::decompress_to_vec_with_limit(data, MAX_METADATA_BYTES)
            .map_err(|e| WheelZipError::Inflate(format!("{e:?}")))?,
        other => return Err(WheelZipError::Method(other)),
    };
    String::from_utf8(bytes).map_err(|e| WheelZipError::Inflate(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel() -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/pypi/wheel-torch-2.12.1-layout.whl");
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Reads the METADATA the way imagegen's `docker::pypi_index` does, from slices of the file only.
    fn read_by_ranges(file: &[u8], tail_length: usize) -> String {
        let tail_start = file.len().saturating_sub(tail_length);
        let directory = central_directory(&file[tail_start..], tail_start as u64).unwrap();
        let start = directory.offset as usize;
        let member = if start >= tail_start {
            metadata_member(&file[start..start + directory.size as usize]).unwrap()
        } else {
            metadata_in_part(&file[tail_start..]).unwrap()
        };
        let header_at = member.local_header_offset as usize;
        let header_end = header_at + LOCAL_HEADER_BYTES as usize + member.name.len();
        let data_at = data_offset(&member, &file[header_at..header_end]).unwrap() as usize;
        inflate(
            &member,
            &file[data_at..data_at + member.compressed_size as usize],
        )
        .unwrap()
    }

    #[test]
    fn the_metadata_member_is_read_from_the_tail_and_the_directory() {
        let file = wheel();
        let expected =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "../../tests/fixtures/pypi/torch-2.12.1-cp311-cp311-manylinux_2_28_aarch64.whl.metadata",
            ))
            .unwrap();
        // The whole central directory in the tail, then only its last part.
        for tail in [file.len(), 400] {
            assert_eq!(
                read_by_ranges(&file, tail),
                expected,
                "tail of {tail} bytes"
            );
        }
        let directory = central_directory(&file, 0).unwrap();
        let start = directory.offset as usize;
        let all = members(&file[start..start + directory.size as usize]).unwrap();
        assert_eq!(all.len(), 43);
        assert_eq!(
            all.iter().filter(|m| is_metadata(&m.name)).count(),
            1,
            "{all:#?}"
        );
    }

    #[test]
    fn only_the_top_level_dist_info_metadata_counts() {
        assert!(is_metadata("torch-2.12.1.dist-info/METADATA"));
        assert!(!is_metadata("torch/vendored-1.0.dist-info/METADATA"));
        assert!(!is_metadata(".dist-info/METADATA"));
        assert!(!is_metadata("torch-2.12.1.dist-info/RECORD"));
    }

    #[test]
    fn zip64_records_give_the_directory() {
        // A tail as a ZIP64 writer leaves it: ZIP64 record, locator, record with full fields.
        let tail_start = 5_000_000_000u64;
        let mut tail = Vec::new();
        tail.extend_from_slice(&ZIP64_END_OF_CENTRAL_DIRECTORY.to_le_bytes());
        tail.extend_from_slice(&44u64.to_le_bytes());
        tail.extend_from_slice(&[45, 0, 45, 0]);
        tail.extend_from_slice(&[0; 8]);
        tail.extend_from_slice(&70_000u64.to_le_bytes());
        tail.extend_from_slice(&70_000u64.to_le_bytes());
        tail.extend_from_slice(&123_456u64.to_le_bytes());
        tail.extend_from_slice(&4_900_000_000u64.to_le_bytes());
        tail.extend_from_slice(&ZIP64_LOCATOR.to_le_bytes());
        tail.extend_from_slice(&0u32.to_le_bytes());
        tail.extend_from_slice(&tail_start.to_le_bytes());
        tail.extend_from_slice(&1u32.to_le_bytes());
        tail.extend_from_slice(&END_OF_CENTRAL_DIRECTORY.to_le_bytes());
        tail.extend_from_slice(&[0; 4]);
        tail.extend_from_slice(&[0xff; 4]);
        tail.extend_from_slice(&u32::MAX.to_le_bytes());
        tail.extend_from_slice(&u32::MAX.to_le_bytes());
        tail.extend_from_slice(&0u16.to_le_bytes());
        assert_eq!(
            central_directory(&tail, tail_start),
            Ok(CentralDirectory {
                offset: 4_900_000_000,
                size: 123_456
            })
        );
        // The locator pointing before the tail: said, not guessed.
        let error = central_directory(&tail, tail_start + 1).unwrap_err();
        assert!(
            error.to_string().contains("not in the last bytes"),
            "{error}"
        );
    }

    #[test]
    fn what_is_not_a_wheel_is_named() {
        let error = central_directory(b"not a zip at all, just text", 0).unwrap_err();
        assert_eq!(
            error.to_string(),
            "not a zip file: no end of central directory record in the last bytes"
        );
        let member = Member {
            name: "torch-2.12.1.dist-info/METADATA".into(),
            method: 12,
            compressed_size: 3,
            uncompressed_size: 3,
            local_header_offset: 0,
        };
        assert_eq!(inflate(&member, b"abc"), Err(WheelZipError::Method(12)));
        let error = data_offset(&member, b"PK\x01\x02 not a local header").unwrap_err();
        assert!(
            error.to_string().contains("no local header at byte 0"),
            "{error}"
        );
    }
}
