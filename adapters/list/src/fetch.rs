//! Fetching a provider's body: a minimal HTTP/1.1 GET over a plain TCP connection, and local
//! files. No TLS, no redirects, no proxies; the body is capped at [`MAX_BODY`].

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::config::{HttpUrl, Provider};

/// Largest body accepted (Istio read without a limit).
pub const MAX_BODY: usize = 64 << 20;
const MAX_HEADER_LINE: usize = 16 << 10;
const MAX_HEADERS: usize = 200;

/// Fetches the provider's current body. Errors are messages for logs and check errors.
pub async fn fetch(provider: &Provider) -> Result<String, String> {
    let bytes = match provider {
        Provider::Http(url) => http_get(url).await?,
        // Small local files: read in place (keeps tests on a paused clock deterministic).
        Provider::File(path) => {
            std::fs::read(path).map_err(|e| format!("could not read {}: {e}", path.display()))?
        }
    };
    if bytes.len() > MAX_BODY {
        return Err(format!("list is larger than {MAX_BODY} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "list is not UTF-8 text".to_string())
}

/// `GET url` and the body of a 200 answer.
pub async fn http_get(url: &HttpUrl) -> Result<Vec<u8>, String> {
    let mut stream = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| format!("could not connect to {}:{}: {e}", url.host, url.port))?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: mixer-listchecker\r\nAccept: */*\r\n\
         Accept-Encoding: identity\r\nConnection: close\r\n\r\n",
        url.path,
        url.host_header()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("could not send request: {e}"))?;
    let (status, body) = read_response(BufReader::new(stream)).await?;
    if status != 200 {
        return Err(format!("provider answered HTTP {status}"));
    }
    Ok(body)
}

async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<String, String> {
    let mut line = Vec::new();
    let n = (&mut *r)
        .take(MAX_HEADER_LINE as u64)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| format!("could not read response: {e}"))?;
    if n == 0 {
        return Err("connection closed before the response was complete".into());
    }
    if !line.ends_with(b"\n") {
        return Err("response line too long or truncated".into());
    }
    let line = String::from_utf8(line).map_err(|_| "response header is not text".to_string())?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// Reads a response: status line, headers, then a body delimited by chunked encoding,
/// Content-Length, or the end of the stream.
pub async fn read_response<R: AsyncBufRead + Unpin>(mut r: R) -> Result<(u16, Vec<u8>), String> {
    let status_line = read_line(&mut r).await?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1.x response: {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;

    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    for i in 0.. {
        if i > MAX_HEADERS {
            return Err("too many response headers".into());
        }
        let line = read_line(&mut r).await?;
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("bad header line {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<usize>()
                .map_err(|_| format!("bad Content-Length {value:?}"))?;
            if n > MAX_BODY {
                return Err(format!("list is larger than {MAX_BODY} bytes"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        }
    }

    let mut body = Vec::new();
    if chunked {
        loop {
            let size_line = read_line(&mut r).await?;
            let size_text = size_line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| format!("bad chunk size {size_line:?}"))?;
            if size == 0 {
                // Trailers, up to the empty line; a missing final CRLF is tolerated.
                while let Ok(line) = read_line(&mut r).await {
                    if line.is_empty() {
                        break;
                    }
                }
                break;
            }
            if body.len() + size > MAX_BODY {
                return Err(format!("list is larger than {MAX_BODY} bytes"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])
                .await
                .map_err(|e| format!("truncated chunk: {e}"))?;
            let crlf = read_line(&mut r).await?;
            if !crlf.is_empty() {
                return Err("chunk not followed by CRLF".into());
            }
        }
    } else if let Some(n) = content_length {
        body.resize(n, 0);
        r.read_exact(&mut body)
            .await
            .map_err(|e| format!("truncated body: {e}"))?;
    } else {
        (&mut r)
            .take(MAX_BODY as u64 + 1)
            .read_to_end(&mut body)
            .await
            .map_err(|e| format!("could not read body: {e}"))?;
        if body.len() > MAX_BODY {
            return Err(format!("list is larger than {MAX_BODY} bytes"));
        }
    }
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(raw: &str) -> Result<(u16, String), String> {
        read_response(raw.as_bytes())
            .await
            .map(|(s, b)| (s, String::from_utf8(b).expect("utf8")))
    }

    #[tokio::test]
    async fn content_length_chunked_and_eof_bodies() {
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello and more").await,
            Ok((200, "hello".into()))
        );
        assert_eq!(
            parse(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\na\nb\n\r\n3\r\nc\nd\r\n0\r\nX-T: 1\r\n\r\n"
            )
            .await,
            Ok((200, "a\nb\nc\nd".into()))
        );
        assert_eq!(
            parse("HTTP/1.0 200 OK\nServer: x\n\nto the end\n").await,
            Ok((200, "to the end\n".into()))
        );
        assert_eq!(
            parse("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").await,
            Ok((404, String::new()))
        );
    }

    #[tokio::test]
    async fn malformed_responses_are_errors() {
        assert!(parse("").await.is_err());
        assert!(parse("SSH-2.0-OpenSSH\r\n").await.is_err());
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
                .await
                .is_err()
        );
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
                .await
                .is_err()
        );
        assert!(
            parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .await
                .is_err()
        );
        assert!(parse("HTTP/1.1 200 OK\r\nno colon\r\n\r\n").await.is_err());
    }
}
