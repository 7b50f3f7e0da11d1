// Copyright 2026 Cloudflare, Inc.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

use crate::*;
use bytes::Bytes;
use http::header;

#[derive(Debug, Clone)]
pub struct CaseHeaderName(Bytes);

impl CaseHeaderName {
    pub fn new(name: String) -> Self {
        CaseHeaderName(name.into())
    }
}

impl CaseHeaderName {
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    pub fn from_slice(buf: &[u8]) -> Self {
        CaseHeaderName(Bytes::copy_from_slice(buf))
    }
}

/// A trait that converts into case-sensitive header names.
pub trait IntoCaseHeaderName {
    fn into_case_header_name(self) -> CaseHeaderName;

    /// signpost patch: the parsed name and the name to write, from a name already parsed when
    /// the caller has one, so that inserting a `HeaderName` neither parses nor copies it again.
    fn into_header_names(self) -> Result<(HeaderName, CaseHeaderName)>
    where
        Self: Sized,
    {
        let case_header_name = self.into_case_header_name();
        let header_name = case_header_name
            .as_slice()
            .try_into()
            .or_err(InvalidHTTPHeader, "invalid header name")?;
        Ok((header_name, case_header_name))
    }
}

impl IntoCaseHeaderName for CaseHeaderName {
    fn into_case_header_name(self) -> CaseHeaderName {
        self
    }
}

impl IntoCaseHeaderName for String {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(self.into())
    }
}

impl IntoCaseHeaderName for &'static str {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(self.into())
    }
}

impl IntoCaseHeaderName for HeaderName {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(titled_header_name(&self))
    }

    // signpost patch: already parsed.
    fn into_header_names(self) -> Result<(HeaderName, CaseHeaderName)> {
        let case_header_name = CaseHeaderName(titled_header_name(&self));
        Ok((self, case_header_name))
    }
}

impl IntoCaseHeaderName for &HeaderName {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(titled_header_name(self))
    }

    // signpost patch: already parsed.
    fn into_header_names(self) -> Result<(HeaderName, CaseHeaderName)> {
        Ok((self.clone(), CaseHeaderName(titled_header_name(self))))
    }
}

impl IntoCaseHeaderName for Bytes {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(self)
    }
}

/// signpost patch: a header name known when the program is built, parsed once: inserting it
/// neither parses nor copies it. It is written as given, in lower case (what
/// `HeaderName::from_static` requires), as the same `&'static str` would be.
#[derive(Debug, Clone)]
pub struct StaticHeaderName {
    name: HeaderName,
    text: &'static str,
}

impl StaticHeaderName {
    /// Panics, at compile time when used for a `const` or `static`, on a name that
    /// `HeaderName::from_static` refuses.
    pub const fn new(text: &'static str) -> Self {
        StaticHeaderName {
            name: HeaderName::from_static(text),
            text,
        }
    }

    pub fn name(&self) -> &HeaderName {
        &self.name
    }

    /// The name as written on the wire.
    pub fn text(&self) -> &'static str {
        self.text
    }
}

impl IntoCaseHeaderName for &StaticHeaderName {
    fn into_case_header_name(self) -> CaseHeaderName {
        CaseHeaderName(Bytes::from_static(self.text.as_bytes()))
    }

    fn into_header_names(self) -> Result<(HeaderName, CaseHeaderName)> {
        Ok((self.name.clone(), self.into_case_header_name()))
    }
}

fn titled_header_name(header_name: &HeaderName) -> Bytes {
    titled_header_name_str(header_name).map_or_else(
        || Bytes::copy_from_slice(header_name.as_str().as_bytes()),
        |s| Bytes::from_static(s.as_bytes()),
    )
}

pub(crate) fn titled_header_name_str(header_name: &HeaderName) -> Option<&'static str> {
    Some(match *header_name {
        header::ACCEPT_RANGES => "Accept-Ranges",
        header::AGE => "Age",
        header::CACHE_CONTROL => "Cache-Control",
        header::CONNECTION => "Connection",
        header::CONTENT_TYPE => "Content-Type",
        header::CONTENT_ENCODING => "Content-Encoding",
        header::CONTENT_LENGTH => "Content-Length",
        header::DATE => "Date",
        header::TRANSFER_ENCODING => "Transfer-Encoding",
        header::HOST => "Host",
        header::SERVER => "Server",
        header::SET_COOKIE => "Set-Cookie",
        // TODO: add more const header here to map to their titled case
        // TODO: automatically upper case the first letter?
        _ => {
            return None;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_case_header_name() {
        assert_eq!("FoO".into_case_header_name().as_slice(), b"FoO");
        assert_eq!("FoO".to_string().into_case_header_name().as_slice(), b"FoO");
        assert_eq!(header::SERVER.into_case_header_name().as_slice(), b"Server");
        // signpost patch
        static XFF: StaticHeaderName = StaticHeaderName::new("x-forwarded-for");
        let (name, case) = (&XFF).into_header_names().unwrap();
        assert_eq!(name, "x-forwarded-for");
        assert_eq!(case.as_slice(), b"x-forwarded-for");
        let (name, case) = (&header::VARY).into_header_names().unwrap();
        assert_eq!(name, header::VARY);
        assert_eq!(case.as_slice(), b"vary");
    }
}
