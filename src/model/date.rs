//! Calendar dates as the knowledge writes them (`2027-05-31`): checked, and counted in days, so
//! the resolver can say how far a date is from today. Pure; today is handed in by the commands.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// A day as the knowledge writes it (`2027-05-31`), checked and counted when it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Day(String, i64);

impl Day {
    /// `YYYY-MM-DD`, a real day of the Gregorian calendar, or `None` when it is not one.
    pub(crate) fn parse(text: &str) -> Option<Day> {
        days_since_epoch(text).map(|days| Day(text.to_string(), days))
    }

    /// Days from 1970-01-01 to this day.
    pub(crate) fn days_since_epoch(&self) -> i64 {
        self.1
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Day {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
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
    let bytes = date.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let text = &date[range];
        text.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| text.parse().ok())
            .flatten()
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month) || day < 1 || day > month_days[(month - 1) as usize] {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let shifted_year = if month <= 2 { year - 1 } else { year };
    let era = shifted_year.div_euclid(400);
    let year_of_era = shifted_year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    Some(era * 146_097 + day_of_era - 719_468)
}

/// The day `days` after 1970-01-01 as `YYYYMMDD` (the form a tag can carry).
pub(crate) fn compact_date(days: i64) -> String {
    // Howard Hinnant's civil_from_days.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}")
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
