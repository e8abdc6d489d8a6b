//! The check of a team's step fragment (`steps:`) as Docker will read it: after rendering, in the
//! Dockerfile around it, through a Dockerfile parser (`parse-dockerfile`, which follows BuildKit's
//! parser: continuations joined, comments inside continuations skipped, parser directives and
//! heredocs understood), never by searching the fragment's text.
//!
//! A fragment runs inside the image imagegen builds, after the lock install: its instructions
//! may do what a Dockerfile does to one image (`RUN`, `COPY`, `ENV`, `USER`, …), never change
//! what the rest of the file means. So the check refuses:
//! - an instruction that starts or reaches into another stage (`FROM`, `COPY --from=`), defers
//!   work into images built from this one (`ONBUILD`) or changes how every later `RUN` is run
//!   (`SHELL`);
//! - flags beyond `--chown`/`--chmod` of `COPY`/`ADD` (BuildKit's mounts and networks are not
//!   what the classic builder runs, and `--from` reaches outside the image);
//! - heredocs: the classic builder imagegen drives reads a heredoc's body as instructions
//!   (checked: Docker 20.10 answers `unknown instruction` for its first line), while BuildKit
//!   reads it as text, so the two builders would build different images from one file;
//! - anything that changes how imagegen's own instructions around the fragment are read: a
//!   trailing continuation that swallows the next line, an open quote. The template's
//!   instructions are parsed with and without the fragment and must be the same instructions.
//!
//! Pure: text in, a verdict out.

use parse_dockerfile::{Flag, Instruction};

/// What is wrong with a fragment: its 1-based line (in the rendered fragment) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FragmentProblem {
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// Flags a fragment's `COPY` and `ADD` may carry.
const ALLOWED_COPY_FLAGS: &[&str] = &["chown", "chmod"];

/// The instruction's keyword and where it starts in the text; `None` for an instruction a newer
/// parser knows and this check does not (refused: what it is not told about, it does not pass).
fn keyword_of(instruction: &Instruction<'_>) -> Option<(&'static str, usize)> {
    Some(match instruction {
        Instruction::Add(i) => ("ADD", i.add.span.start),
        Instruction::Arg(i) => ("ARG", i.arg.span.start),
        Instruction::Cmd(i) => ("CMD", i.cmd.span.start),
        Instruction::Copy(i) => ("COPY", i.copy.span.start),
        Instruction::Entrypoint(i) => ("ENTRYPOINT", i.entrypoint.span.start),
        Instruction::Env(i) => ("ENV", i.env.span.start),
        Instruction::Expose(i) => ("EXPOSE", i.expose.span.start),
        Instruction::From(i) => ("FROM", i.from.span.start),
        Instruction::Healthcheck(i) => ("HEALTHCHECK", i.healthcheck.span.start),
        Instruction::Label(i) => ("LABEL", i.label.span.start),
        Instruction::Maintainer(i) => ("MAINTAINER", i.maintainer.span.start),
        Instruction::Onbuild(i) => ("ONBUILD", i.onbuild.span.start),
        Instruction::Run(i) => ("RUN", i.run.span.start),
        Instruction::Shell(i) => ("SHELL", i.shell.span.start),
        Instruction::Stopsignal(i) => ("STOPSIGNAL", i.stopsignal.span.start),
        Instruction::User(i) => ("USER", i.user.span.start),
        Instruction::Volume(i) => ("VOLUME", i.volume.span.start),
        Instruction::Workdir(i) => ("WORKDIR", i.workdir.span.start),
        _ => return None,
    })
}

const UNKNOWN: &str = "the Dockerfile parser read an instruction this imagegen does not check";

/// 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Every instruction of `text` as (keyword, start), or the parser's error with its line.
fn instructions(text: &str) -> Result<Vec<(&'static str, usize)>, (usize, String)> {
    let parse_error = |error: parse_dockerfile::Error| (error.line(), format!("{error:#}"));
    let mut found = Vec::new();
    for instruction in parse_dockerfile::parse_iter(text).map_err(parse_error)? {
        found.push(keyword_of(&instruction.map_err(parse_error)?).ok_or((1, UNKNOWN.to_string()))?);
    }
    Ok(found)
}

/// Why the fragment's `instruction` is refused, if it is.
fn refused(instruction: &Instruction<'_>) -> Option<String> {
    let flags_beyond = |flags: &[Flag<'_>], allowed: &[&str]| {
        flags
            .iter()
            .map(|flag| flag.name.value.to_string())
            .find(|name| !allowed.contains(&name.as_str()))
    };
    match instruction {
        Instruction::From(_) => Some(
            "a step fragment may not start a new stage (FROM): it runs inside the image, and what imagegen built above it would be dropped".into(),
        ),
        Instruction::Onbuild(_) => Some(
            "ONBUILD is refused: it would run its instruction in every image built FROM this one, outside the fragment".into(),
        ),
        Instruction::Shell(_) => Some(
            "SHELL is refused: it changes how every later RUN of imagegen's own is run".into(),
        ),
        Instruction::Copy(copy) => match flags_beyond(&copy.options, ALLOWED_COPY_FLAGS) {
            Some(name) if name == "from" => Some(
                "COPY --from is refused: it copies from another stage or image, outside the image imagegen builds".into(),
            ),
            Some(name) => Some(format!(
                "COPY --{name} is refused: a fragment's COPY takes only --chown and --chmod"
            )),
            None => None,
        },
        Instruction::Add(add) => flags_beyond(&add.options, ALLOWED_COPY_FLAGS).map(|name| {
            format!("ADD --{name} is refused: a fragment's ADD takes only --chown and --chmod")
        }),
        Instruction::Run(run) => {
            if let Some(flag) = run.options.first() {
                Some(format!(
                    "RUN --{} is refused: the classic builder imagegen drives runs no RUN flags (mounts, networks, security modes are BuildKit's)",
                    flag.name.value
                ))
            } else if !run.here_docs.is_empty() {
                Some(HEREDOC.into())
            } else {
                None
            }
        }
        _ => None,
    }
}

const HEREDOC: &str = "heredocs (`<<EOF`) are refused: the classic builder imagegen drives reads their body as instructions, BuildKit as text, so one file would build two different images; write the lines with `printf` or COPY a file";

/// Checks `fragment` where the template put it, between `before` and `after` (the rendered
/// Dockerfile is `before + fragment + after`).
pub(crate) fn check_in_context(
    before: &str,
    fragment: &str,
    after: &str,
) -> Result<(), FragmentProblem> {
    let whole = format!("{before}{fragment}{after}");
    let start = before.len();
    let end = start + fragment.len();
    let fragment_line = |offset: usize| line_at(fragment, offset.saturating_sub(start));
    let first_line = line_at(&whole, start);
    let last_line = line_at(&whole, end);
    // The parser's own errors: where they fall inside the fragment, at the fragment's line.
    let in_fragment = |line: usize| (first_line..=last_line).contains(&line);
    let parse_problem = |(line, message): (usize, String)| FragmentProblem {
        line: if in_fragment(line) {
            line - first_line + 1
        } else {
            line_at(fragment, fragment.len())
        },
        message: if in_fragment(line) {
            format!("Docker cannot read it: {message}")
        } else {
            format!("the Dockerfile around it no longer parses once it is in (at its line {line}: {message}): a quote, continuation or heredoc it leaves open runs into imagegen's own instructions")
        },
    };
    let parsed: Vec<Instruction<'_>> = parse_dockerfile::parse_iter(&whole)
        .map_err(|error| parse_problem((error.line(), format!("{error:#}"))))?
        .collect::<Result<_, _>>()
        .map_err(|error| parse_problem((error.line(), format!("{error:#}"))))?;
    let mut keywords = Vec::with_capacity(parsed.len());
    for instruction in &parsed {
        keywords.push(keyword_of(instruction).ok_or(FragmentProblem {
            line: 1,
            message: UNKNOWN.into(),
        })?);
    }
    for (instruction, &(keyword, at)) in parsed.iter().zip(&keywords) {
        if !(start..end).contains(&at) {
            continue;
        }
        if let Some(message) = refused(instruction) {
            return Err(FragmentProblem {
                line: fragment_line(at),
                message,
            });
        }
        // COPY and ADD heredocs carry their body as sources.
        if matches!(keyword, "COPY" | "ADD") {
            let has_here_doc = match instruction {
                Instruction::Copy(copy) => copy
                    .src
                    .iter()
                    .any(|source| matches!(source, parse_dockerfile::Source::HereDoc(_))),
                Instruction::Add(add) => add
                    .src
                    .iter()
                    .any(|source| matches!(source, parse_dockerfile::Source::HereDoc(_))),
                _ => false,
            };
            if has_here_doc {
                return Err(FragmentProblem {
                    line: fragment_line(at),
                    message: HEREDOC.into(),
                });
            }
        }
    }
    // imagegen's own instructions, read without the fragment and with it, must be the same.
    let template_alone = format!("{before}{after}");
    let expected = instructions(&template_alone).map_err(|(line, message)| FragmentProblem {
        line: 1,
        message: format!(
            "the template around the fragment does not parse (line {line}: {message}); this is imagegen's bug"
        ),
    })?;
    let around: Vec<(&'static str, usize)> = keywords
        .into_iter()
        .filter(|(_, at)| !(start..end).contains(at))
        .map(|(keyword, at)| (keyword, if at >= end { at - fragment.len() } else { at }))
        .collect();
    if around != expected {
        let swallowed = expected
            .iter()
            .find(|instruction| !around.contains(instruction))
            .map(|(keyword, at)| {
                format!(
                    " (imagegen's {keyword} at line {} is read as part of the fragment's last instruction)",
                    line_at(&template_alone, *at)
                )
            })
            .unwrap_or_default();
        return Err(FragmentProblem {
            line: line_at(fragment, fragment.trim_end().len()),
            message: format!(
                "the fragment changes how imagegen's own instructions after it are read: it must end where its last instruction ends, with no continuation (`\\`), quote or heredoc left open{swallowed}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# header\nFROM base:1 AS system\nRUN echo venv\n\n# The team's steps\n";
    const AFTER: &str =
        "\nENV NVIDIA_VISIBLE_DEVICES=all\nUSER 1000:1000\nLABEL imagegen.torch=\"2.13.0\"\n";

    fn check(fragment: &str) -> Result<(), FragmentProblem> {
        check_in_context(BEFORE, fragment, AFTER)
    }

    #[test]
    fn ordinary_fragments_pass() {
        for fragment in [
            "RUN mkdir -p /etc/team \\\n && printf 'torch = \"2.13.0\"\\n' > /etc/team/config.toml\n",
            "# a comment\nENV TEAM=1\nCOPY --chown=1000:1000 team.toml /etc/team/\nUSER root\nEXPOSE 8888\n",
            "run echo lowercase is read as RUN\n",
            "HEALTHCHECK --interval=30s CMD curl -f http://localhost/ || exit 1\nCMD [\"python\"]\n",
        ] {
            check(fragment).unwrap_or_else(|e| panic!("{fragment:?}: {e:?}"));
        }
    }

    #[test]
    fn a_new_stage_however_it_is_spelled_is_refused() {
        let cases: &[(&str, usize)] = &[
            ("RUN true\nFROM busybox:1\n", 2),
            ("RUN true\nFR\\\nOM busybox:1\n", 2),
            ("RUN true\nfrom busybox:1\n", 2),
            ("  FROM busybox:1\n", 1),
            ("RUN true\n\\\nFROM busybox:1\n", 3),
        ];
        for (fragment, line) in cases {
            let problem = check(fragment).unwrap_err();
            assert_eq!(problem.line, *line, "{fragment:?}: {problem:?}");
            assert!(
                problem.message.contains("new stage") || problem.message.contains("cannot read"),
                "{fragment:?}: {problem:?}"
            );
        }
    }

    #[test]
    fn instructions_that_reach_outside_the_image_are_refused() {
        for (fragment, word) in [
            ("COPY --from=builder /x /x\n", "COPY --from"),
            ("COPY --from=busybox:1 /bin/sh /bin/sh\n", "COPY --from"),
            ("ONBUILD RUN id\n", "ONBUILD"),
            ("SHELL [\"/bin/bash\", \"-c\"]\n", "SHELL"),
            (
                "RUN --mount=type=cache,target=/root/.cache true\n",
                "RUN --mount",
            ),
            ("RUN --network=host true\n", "RUN --network"),
            (
                "ADD --checksum=sha256:00 https://x/y /y\n",
                "ADD --checksum",
            ),
            ("COPY --link a /a\n", "COPY --link"),
        ] {
            let problem = check(fragment).unwrap_err();
            assert!(problem.message.contains(word), "{fragment:?}: {problem:?}");
        }
    }

    #[test]
    fn heredocs_are_refused_since_the_two_builders_read_them_differently() {
        for fragment in [
            "RUN <<EOF\necho hi\nFROM busybox:1\nEOF\n",
            "COPY <<EOF /etc/team.conf\nx\nEOF\n",
        ] {
            let problem = check(fragment).unwrap_err();
            assert!(
                problem.message.contains("heredoc"),
                "{fragment:?}: {problem:?}"
            );
            assert_eq!(problem.line, 1);
        }
    }

    #[test]
    fn a_fragment_that_swallows_or_breaks_the_next_instruction_is_refused() {
        for fragment in [
            "RUN echo hi \\\n",
            "RUN echo hi \\",
            "RUN echo hi \\\n\n",
            "RUN echo hi \\\n# a comment\n\n",
        ] {
            let problem = check(fragment).unwrap_err();
            assert!(
                problem.message.contains("imagegen's own instructions")
                    || problem.message.contains("no longer parses")
                    || problem.message.contains("cannot read"),
                "{fragment:?}: {problem:?}"
            );
        }
        let problem = check("RUN true\nRUN echo hi \\\n").unwrap_err();
        assert_eq!(problem.line, 2, "{problem:?}");
        assert!(problem.message.contains("ENV at line"), "{problem:?}");
    }

    #[test]
    fn unknown_instructions_are_refused_at_their_line() {
        let problem = check("RUN true\nFOO bar\n").unwrap_err();
        assert_eq!(problem.line, 2, "{problem:?}");
        assert!(problem.message.contains("cannot read"), "{problem:?}");
    }
}
