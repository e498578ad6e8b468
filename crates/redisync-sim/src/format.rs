//! Number parsing and formatting as Redis does it (`string2ll`, `strtod`
//! with Redis's checks, `printf("%.17g")`).

/// Redis's `string2ll`: a decimal integer, strictly (no sign but `-`, no
/// leading zeros, no spaces, no overflow).
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if negative {
        if v > 1u64 << 63 {
            return None;
        }
        // -(2^63) fits; wrapping_neg maps it onto i64::MIN.
        Some(0i64.wrapping_sub_unsigned(v))
    } else {
        i64::try_from(v).ok()
    }
}

/// Redis's `getDoubleFromObject`: `strtod` over the whole string, not empty,
/// no leading space, no overflow or underflow to zero, not NaN.
pub(crate) fn parse_f64(s: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(s).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let v = parse_strtod(text)?;
    let magnitude = text.trim_start_matches(['+', '-']);
    if v.is_infinite() && !is_inf_word(magnitude) {
        // ERANGE: overflow.
        return None;
    }
    if v == 0.0 && mantissa_has_nonzero(magnitude) {
        // ERANGE: underflow to zero.
        return None;
    }
    Some(v)
}

/// A bound of ZRANGEBYSCORE and the like (`zslParseRange`): `(` for an
/// exclusive bound, then `strtod` over the rest (leading spaces and an empty
/// string, read as 0, are accepted; NaN is not).
pub(crate) fn parse_score_bound(s: &[u8]) -> Option<(f64, bool)> {
    let (exclusive, rest) = match s.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, s),
    };
    let text = std::str::from_utf8(rest).ok()?;
    let text = text.trim_start_matches(|c: char| c.is_ascii_whitespace());
    if text.is_empty() {
        return Some((0.0, exclusive));
    }
    parse_strtod(text).map(|v| (v, exclusive))
}

/// `strtod` for the decimal forms (and `inf`/`infinity`), NaN refused.
fn parse_strtod(text: &str) -> Option<f64> {
    let magnitude = text.trim_start_matches(['+', '-']);
    if magnitude.len() + 1 < text.len() {
        // More than one sign.
        return None;
    }
    if magnitude.eq_ignore_ascii_case("nan") {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    if v.is_nan() {
        return None;
    }
    Some(v)
}

fn is_inf_word(s: &str) -> bool {
    s.eq_ignore_ascii_case("inf") || s.eq_ignore_ascii_case("infinity")
}

fn mantissa_has_nonzero(s: &str) -> bool {
    s.bytes()
        .take_while(|c| !matches!(c, b'e' | b'E'))
        .any(|c| matches!(c, b'1'..=b'9'))
}

/// C's `printf("%.17g", v)` (glibc), as Redis 7.0 formats doubles: Lua
/// numbers passed to commands, and zset scores in replies.
pub(crate) fn format_g17(v: f64) -> String {
    const PRECISION: i32 = 17;
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // 17 significant digits, correctly rounded: d.dddddddddddddddde<exp>.
    let sci = format!("{:.16e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if !(-4..PRECISION).contains(&exp) {
        let digits = digits.trim_end_matches('0');
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}{rest}e{exp_sign}{:02}", exp.abs());
    }
    let out = if exp >= 0 {
        let int_len = usize::try_from(exp + 1).expect("exp >= 0");
        let (int, frac) = digits.split_at(int_len);
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            int.to_owned()
        } else {
            format!("{int}.{frac}")
        }
    } else {
        let zeros = "0".repeat(usize::try_from(-exp - 1).expect("exp < 0"));
        format!("0.{zeros}{}", digits.trim_end_matches('0'))
    };
    format!("{sign}{out}")
}

/// A Lua number as Redis replies it: `(long long)` of the double, with the
/// x86-64 result (`i64::MIN`) for NaN and values out of range.
pub(crate) fn lua_number_to_integer(v: f64) -> i64 {
    // 2^63 as f64, exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if v.is_nan() || !(-LIMIT..LIMIT).contains(&v) {
        i64::MIN
    } else {
        #[allow(clippy::cast_possible_truncation)]
        let n = v as i64;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g17_matches_printf() {
        let cases: &[(f64, &str)] = &[
            (0.1, "0.10000000000000001"),
            (1e-5, "1.0000000000000001e-05"),
            (0.5, "0.5"),
            (1e22, "1e+22"),
            (123_456_789_012_345_678.0, "1.2345678901234568e+17"),
            (1_700_000_000_000.0, "1700000000000"),
            (1_700_000_000_000.5, "1700000000000.5"),
            (1_700_000_000_000_000.0, "1700000000000000"),
            (-3.0, "-3"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (2.5e-7, "2.4999999999999999e-07"),
            (123.456, "123.456"),
            (f64::INFINITY, "inf"),
        ];
        for &(v, want) in cases {
            assert_eq!(format_g17(v), want, "{v}");
        }
    }

    #[test]
    fn integers_parse_as_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b"01"[..],
            b"+1",
            b"-0",
            b"",
            b" 1",
            b"1.5",
            b"9223372036854775808",
            b"-",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn floats_parse_as_redis() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"+inf"), Some(f64::INFINITY));
        for bad in [&b"nan"[..], b"1e400", b"1e-400", b"", b" 1", b"x", b"1x"] {
            assert_eq!(parse_f64(bad), None, "{bad:?}");
        }
        assert_eq!(parse_score_bound(b"(5"), Some((5.0, true)));
        assert_eq!(parse_score_bound(b"-inf"), Some((f64::NEG_INFINITY, false)));
        assert_eq!(parse_score_bound(b"x"), None);
    }

    #[test]
    fn out_of_range_numbers_reply_as_x86_does() {
        assert_eq!(lua_number_to_integer(1.9), 1);
        assert_eq!(lua_number_to_integer(-1.9), -1);
        assert_eq!(lua_number_to_integer(2f64.powi(63)), i64::MIN);
        assert_eq!(lua_number_to_integer(f64::NAN), i64::MIN);
    }
}
