//! Calendar dates as the knowledge writes them (`2027-05-31`): checked, and counted in days, so
//! the resolver can say how far a date is from today. The calendar is jiff's (`jiff::civil::Date`);
//! this module only fixes the form. Pure; today is handed in by the commands.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// A day as the knowledge writes it (`2027-05-31`), checked and counted when it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Day(jiff::civil::Date);

/// The day the counts start from.
const EPOCH: jiff::civil::Date = jiff::civil::date(1970, 1, 1);

impl Day {
    /// `YYYY-MM-DD`, a real day of the Gregorian calendar, or `None` when it is not one.
    pub(crate) fn parse(text: &str) -> Option<Day> {
        // jiff's strptime takes `2025-5-31` and signed years too; the knowledge writes exactly
        // four, two and two digits.
        let digits_at = |range: std::ops::Range<usize>| {
            text.get(range)
                .is_some_and(|part| part.bytes().all(|b| b.is_ascii_digit()))
        };
        if text.len() != 10 || !digits_at(0..4) || !digits_at(5..7) || !digits_at(8..10) {
            return None;
        }
        jiff::civil::Date::strptime("%Y-%m-%d", text).ok().map(Day)
    }

    /// Days from 1970-01-01 to this day.
    pub(crate) fn days_since_epoch(&self) -> i64 {
        i64::from(EPOCH.until(self.0).map_or(0, |span| span.get_days()))
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Day {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Day {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Day::parse(&text)
            .ok_or_else(|| de::Error::custom(format!("date {text:?} is not a day (YYYY-MM-DD)")))
    }
}

/// Days from 1970-01-01 to `date` (`YYYY-MM-DD`, a real day of the Gregorian calendar), or
/// `None` when it is not one.
pub(crate) fn days_since_epoch(date: &str) -> Option<i64> {
    Day::parse(date).map(|day| day.days_since_epoch())
}

/// The day `days` after 1970-01-01 as `YYYYMMDD` (the form a tag can carry).
pub(crate) fn compact_date(days: i64) -> String {
    let day = jiff::Span::new()
        .try_days(days)
        .ok()
        .and_then(|span| EPOCH.checked_add(span).ok())
        .unwrap_or(EPOCH);
    day.strftime("%Y%m%d").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_dates_are_the_days_counted_back() {
        for day in [
            "1970-01-01",
            "2000-02-29",
            "2024-12-31",
            "2026-03-01",
            "2100-03-01",
        ] {
            let days = days_since_epoch(day).unwrap();
            assert_eq!(compact_date(days), day.replace('-', ""), "{day}");
        }
    }

    #[test]
    fn days_are_counted_from_the_epoch_across_leap_years() {
        assert_eq!(days_since_epoch("1970-01-01"), Some(0));
        assert_eq!(days_since_epoch("2000-03-01"), Some(11_017));
        assert_eq!(
            days_since_epoch("2027-05-31").unwrap() - days_since_epoch("2026-12-02").unwrap(),
            180
        );
        assert_eq!(
            days_since_epoch("2024-03-01").unwrap() - days_since_epoch("2024-02-28").unwrap(),
            2
        );
    }

    #[test]
    fn what_is_not_a_day_is_refused() {
        for bad in [
            "2025-02-29",
            "2025-13-01",
            "2025-5-31",
            "May 2025",
            "2025-04-31",
            "+025-01-01",
        ] {
            assert_eq!(days_since_epoch(bad), None, "{bad}");
        }
    }
}
