//! Suggestions for names people mistype: the one edit distance imagegen uses, and the closest
//! known names to a wrong one (matrix keys, versions, tags, aliases). Pure.

/// Levenshtein distance between two strings, counted in characters.
pub(crate) fn edit_distance(left: &str, right: &str) -> usize {
    let right: Vec<char> = right.chars().collect();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    for (i, left_char) in left.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, right_char) in right.iter().enumerate() {
            let substitution = previous[j] + usize::from(left_char != *right_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[right.len()]
}

/// Up to `limit` of `candidates`, closest to `wanted` first (ties by name), without repeats.
pub(crate) fn closest<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    limit: usize,
) -> Vec<&'a str> {
    let mut names: Vec<&str> = candidates.into_iter().collect();
    names.sort_by_key(|name| (edit_distance(wanted, name), *name));
    names.dedup();
    names.truncate(limit);
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("torhc", "torch"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn closest_names_first() {
        assert_eq!(
            closest("2.1", ["2.13", "2.12", "2.1", "3.0"], 2),
            vec!["2.1", "2.12"]
        );
        assert_eq!(closest("x", ["b", "a", "a"], 5), vec!["a", "b"]);
    }
}
