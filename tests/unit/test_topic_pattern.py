"""``subscribePattern`` as Spark's Kafka source applies it (seglake.spark.topic_pattern):
Java's ``Pattern.compile(p).matcher(topic).find()`` is the judge, run on the same
patterns and names by the JVM when there is one (``java`` runs a one-file program)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from seglake.errors import ConfigError
from seglake.spark.stream_source import rate_limit
from seglake.spark.topic_pattern import TopicPattern

TOPICS = [
    "topic",
    "topic1",
    "topic2",
    "my-topic",
    "Topic_2",
    "TOPIC",
    "a.b",
    "spark-in",
    "spark_out",
    "x",
    "A",
    "_",
    "-",
    ".",
    "123",
    "orders.v2",
    "events-eu-1",
    "aaa",
    "ab",
    "ba",
    "abab",
    "C",
    "c",
    "b",
    "B",
    "AbC",
]
# globs users write, Java-only syntax (classes with && and nesting, \\Q..\\E, \\p{..},
# mid-pattern flags, named groups), and patterns Java refuses or Python reads otherwise
PATTERNS = [
    "topic",
    "spark",
    "topic*",
    ".*",
    "^topic$",
    "topic1|other",
    "TOPIC",
    "(?i)TOPIC",
    "\\Qmy-topic\\E",
    "\\p{Lower}+\\d",
    "top{",
    "[a-z&&[^t]]+",
    "__.*",
    "^[a-z]+$",
    "\\w+\\.\\w+",
    "[^a-z]",
    "[[a-c][x-z]]",
    "[a-z&&[def]]",
    "(?i)[^t]opic",
    "(?<name>t)o(?:p)\\k<name>",
    "a{2}",
    "a{2,}",
    "a{,2}",
    "x{1,0}",
    "\\d{3}",
    "(?x) t o p i c",
    "(?i)top|SPARK",
    "a(?i)B|C",
    "^(?i:T)opic",
    "\\bspark\\b",
    "spark\\B",
    "\\z",
    "topic\\Z",
    "\\Atopic",
    "\\p{Punct}",
    "\\P{Alnum}",
    "\\p{IsAlphabetic}+",
    "\\p{L}+",
    "\\p{Lu}",
    "\\p{javaUpperCase}",
    "\\p{InBasicLatin}",
    "\\p{IsLatin}",
    "[\\p{Upper}\\d]",
    "\\h",
    "\\H",
    "\\v",
    "\\s",
    "\\S",
    "\\x41",
    "\\u0041",
    "\\0101",
    "\\x{41}",
    "\\cA",
    "\\e",
    "(?P<n>a)",
    "\\y",
    "[a-]",
    "[-a]",
    "[a\\-z]",
    "[\\]a]",
    "[]a]",
    "[^]",
    "(",
    ")",
    "a**",
    "a*+",
    "(?>to)pic",
    "(?<=my-)topic",
    "(?<!my-)topic",
    "(?s).*",
    "(?m)^topic$",
    "(?U)\\w+",
    "(?u)(?i)TOPIC",
    "[\\Q-.\\E]",
    "[.]",
    "\\.",
    ".",
    "a|",
    "|",
    "(?-i)topic",
    "(?i)T(?-i)OPIC",
    "topic(?=1)",
    "*topic",
    "+",
    "?",
    "\\",
    "[z-a]",
    "\\R",
    "\\X",
    "[a-c&&b-d]",
    "[^a-c&&b]",
    "x(?i)",
    "((?i)T)OPIC",
    "(?i)[^A]",
    "(?i)\\p{Lower}",
    "(?i)\\P{Lower}",
    "[\\w&&[^\\d]]",
    "\\Qa.b",
    "[&&a]",
    "[a&&]",
    "^-$",
    "^\\.$",
    "\\p{Pd}",
    "\\p{Pc}",
    "\\p{Po}",
    "\\p{Alpha}\\p{Digit}",
    "\\p{IsDigit}",
    "\\p{Nd}",
    "\\p{N}",
    "(?x)[ a ]",
    "(?x)a # comment",
    "[a-z&&[^aeiou]]+1",
    "(a)(b)\\2",
    "\\1",
    "(?i)a|b(?-i)|C",
]
JAVA_FIND = """
import java.io.*;
import java.util.*;
import java.util.regex.*;
public class Find {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        List<String> topics = Arrays.asList(in.readLine().split(" "));
        String line;
        while ((line = in.readLine()) != null) {
            StringBuilder out = new StringBuilder();
            try {
                Pattern p = Pattern.compile(line);
                for (String t : topics) out.append(p.matcher(t).find() ? '1' : '0');
            } catch (PatternSyntaxException e) {
                out.append("ERR");
            }
            System.out.println(out);
        }
    }
}
"""


def ours(pattern: str) -> str:
    try:
        regex = TopicPattern(pattern).regex
    except ConfigError:
        return "ERR"
    return "".join("1" if regex.search(t) else "0" for t in TOPICS)


@pytest.mark.skipif(shutil.which("java") is None, reason="no java here")
def test_every_pattern_finds_what_javas_find_finds(tmp_path):
    src = tmp_path / "Find.java"
    src.write_text(JAVA_FIND)
    stdin = " ".join(TOPICS) + "\n" + "\n".join(PATTERNS) + "\n"
    done = subprocess.run(
        ["java", str(src)], input=stdin, capture_output=True, text=True, timeout=120
    )
    java = done.stdout.splitlines()
    assert len(java) == len(PATTERNS), done.stderr
    diffs = [(p, j, ours(p)) for p, j in zip(PATTERNS, java, strict=True) if ours(p) != j]
    assert diffs == []


def test_a_glob_like_pattern_is_found_in_the_name_internal_topics_never():
    """The issue's patterns: Kafka's source read 3, 2 and 3 topics with them."""
    names = ["topic1", "topic2", "my-topic", "spark-in", "spark_out", "other"]
    names += ["__consumer_offsets", "__transaction_state", "__cluster_metadata"]
    found = {
        p: [t for t in names if TopicPattern(p).matches(t)] for p in ("topic", "spark", "topic*")
    }
    assert found == {
        "topic": ["topic1", "topic2", "my-topic"],
        "spark": ["spark-in", "spark_out"],
        "topic*": ["topic1", "topic2", "my-topic"],
    }
    assert [t for t in names if TopicPattern(".*").matches(t)] == names[:6]
    assert [t for t in names if TopicPattern("__").matches(t)] == []


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("top{", "illegal repetition near index 3"),
        ("(?P<n>a)", "unknown inline modifier or group"),
        ("\\y", "illegal/unsupported escape sequence \\y"),
        ("[z-a]", "illegal character range"),
        ("\\p{Klingon}", "unknown character property"),
        ("(a", "unclosed group"),
    ],
)
def test_a_pattern_java_refuses_is_one_line(pattern, message):
    with pytest.raises(ConfigError) as info:
        TopicPattern(pattern)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith(f"subscribePattern: {pattern!r}")


def test_rate_limit_is_kafkas():
    """KafkaMicroBatchStream.rateLimit: floor of limit * size / total per partition (a
    share below 1 ceiled), partitions without new offsets at their end."""
    parts = {("t", p): 0 for p in range(3)}
    assert rate_limit(parts, {tp: 1000 for tp in parts}, 500) == {tp: 166 for tp in parts}
    start = {("a", 0): 10, ("a", 1): 0, ("b", 0): 5}
    end = {("a", 0): 110, ("a", 1): 1, ("b", 0): 5}
    # a-0: 7 * 100/101 = 6.93 -> 6; a-1: 7 * 1/101 = 0.07 -> 1 (not starved); b-0: no lag
    assert rate_limit(start, end, 7) == {("a", 0): 16, ("a", 1): 1, ("b", 0): 5}
    assert rate_limit(start, end, 1000) == end  # never past the end
    seven = {("t", p): 30 for p in range(7)}
    assert rate_limit(dict.fromkeys(seven, 0), seven, 7) == dict.fromkeys(seven, 1)
