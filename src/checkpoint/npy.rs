//! NPY (numpy's array file format, version 1.0) headers: the one header this crate writes for
//! each array, and its check on reading. Data starts on a 64-byte boundary, so that
//! `numpy.load(path, mmap_mode="r")` maps it aligned.

use crate::dtype::DType;

/// The six bytes every NPY file starts with.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Data offset alignment: numpy's own choice since 1.21, and a cache line.
pub(crate) const ALIGN: usize = 64;

/// numpy's type string of a dtype (little-endian; one-byte types have no byte order).
pub(crate) fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::Bool => "|b1",
    }
}

/// The complete header (magic, version, length, dict, padding) of a C-order array of
/// `descr` and `shape`, its length a multiple of [`ALIGN`].
pub(crate) fn header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // magic (6) + version (2) + header length (2) + dict + padding + '\n'
    let unpadded = 10 + dict.len() + 1;
    let padding = unpadded.next_multiple_of(ALIGN) - unpadded;
    let len = dict.len() + padding + 1;
    let mut out = Vec::with_capacity(10 + len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    // A header of a few dozen bytes: always within version 1.0's u16 length.
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', padding));
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_aligned_and_say_what_numpy_reads() {
        for shape in [&[7usize][..], &[1 << 20, 4], &[3, 1]] {
            let h = header("<f4", shape);
            assert_eq!(h.len() % ALIGN, 0);
            assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
            assert_eq!(u16::from_le_bytes([h[8], h[9]]) as usize, h.len() - 10);
            assert_eq!(*h.last().unwrap(), b'\n');
            let text = std::str::from_utf8(&h[10..]).unwrap();
            assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': ("));
        }
        let text = |h: Vec<u8>| String::from_utf8(h[10..].to_vec()).unwrap();
        assert!(text(header("<u8", &[5])).contains("'shape': (5,)"));
        assert!(text(header("|b1", &[5, 2])).contains("'shape': (5, 2)"));
    }
}
